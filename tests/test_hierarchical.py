"""Hierarchical (two-level) allreduce and allgather, exact for every dtype and op the flat allreduce
supports (body: tests/hier_body.py).

Two set-ups: "hosts" named by PYHOROVOD_HOSTNAME on this machine (fast, any layout, including ranks of
one host that are not consecutive), and real network namespaces (tests/netns.py), where shared memory
joins the ranks inside a namespace and only TCP over the veth links joins the namespaces."""
import pytest

from mp import run_ranks
from netns import Network, cleanup_stale, require_netns
from netns_ranks import run_job

ON = {"HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "HOROVOD_HIERARCHICAL_ALLGATHER": "1"}


def _named_hosts(hosts, extra):
    def env(r):
        h = hosts[r]
        return {"PYHOROVOD_HOSTNAME": f"host{h}", "PYHOROVOD_LOCAL_RANK": str(hosts[:r].count(h)),
                "PYHOROVOD_LOCAL_SIZE": str(hosts.count(h)), "PYHOROVOD_CROSS_RANK": str(sorted(set(hosts)).index(h)),
                "PYHOROVOD_CROSS_SIZE": str(len(set(hosts))), **extra}
    return env


@pytest.mark.parametrize("hosts,extra", [
    ([0, 0, 1, 1], ON),                     # 2 hosts x 2 ranks
    ([0, 1, 1, 0], ON),                     # the same, ranks of a host not consecutive
    ([0, 1], ON),                           # 2 hosts x 1 rank: the cross allreduce is everything
    ([0, 0], ON),                           # 1 host: degenerates to the flat ring
    ([0, 0, 1, 1], {}),                     # automatic choice (the model, per size)
], ids=["2x2", "2x2-interleaved", "2x1", "1x2", "2x2-auto"])
def test_hierarchical_exact_named_hosts(hosts, extra):
    results = run_ranks("hier_body:body", len(hosts), timeout=300, env=_named_hosts(hosts, extra))
    expected_layout = [sorted(set(hosts)).index(h) for h in hosts]
    for r in results:
        assert r.value["checks"] == 543
        assert r.value["host_of"] == expected_layout
        assert r.value["allreduce_mode"] == (1 if extra else -1)


@pytest.fixture(scope="module")
def net():
    require_netns()
    cleanup_stale()
    with Network(hosts=2) as network:
        yield network


@pytest.mark.parametrize("per_host", [2, 1])
def test_hierarchical_exact_across_namespaces(net, per_host):
    rows = run_job(net, per_host, ["python3", "-m", "hier_body"], timeout=300, env=ON)
    for rank, row in enumerate(rows):
        assert row["checks"] == 543
        assert row["host_of"] == [r // per_host for r in range(2 * per_host)]
        assert row["local"] == [rank % per_host, per_host]


def test_hierarchical_allreduce_moves_fewer_bytes_across_hosts(net):
    """2 hosts x 2 ranks, M = 4 MiB: a flat ring sends 2(p-1)/p M = 1.5 M out of each host (one ring edge
    leaves it), the hierarchical allreduce 2 shards x 2(H-1)/H x M/2 = M."""
    m = 4 << 20
    rows = run_job(net, 2, ["python3", "-m", "hier_body", "traffic"], timeout=120)
    for rank, row in enumerate(rows):
        # Both ranks of a host read the host's TCP payload counter; our frame headers, barriers and
        # negotiation add a little.
        assert 1.5 * m <= row["flat"] <= 1.6 * m, (rank, row)
        assert 1.0 * m <= row["hierarchical"] <= 1.1 * m, (rank, row)
