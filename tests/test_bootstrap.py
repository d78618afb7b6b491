"""Rank discovery (pyhorovod/_bootstrap.py) and rendezvous choices (pyhorovod/_rendezvous.py).

Pure unit tests with environments built by the test, plus real multi-process inits under torchrun-style
variables and with hosts simulated by PYHOROVOD_HOSTNAME."""
import logging

import pytest

from mp import run_ranks
from pyhorovod import _bootstrap as bs
from pyhorovod import _rendezvous as rv
from pyhorovod._bootstrap import RankInfo
from pyhorovod._config import Config

# One environment per source, each saying a different rank, so the winner is visible.
SOURCES = {
    "pyhorovod": {"PYHOROVOD_RANK": "1", "PYHOROVOD_SIZE": "6"},
    "horovod": {"HOROVOD_RANK": "2", "HOROVOD_SIZE": "6"},
    "torchrun": {"RANK": "3", "WORLD_SIZE": "6"},
    "openmpi": {"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "6"},
    "pmi": {"PMI_RANK": "5", "PMI_SIZE": "6"},
    "slurm": {"SLURM_PROCID": "0", "SLURM_NTASKS": "6", "SLURM_STEP_ID": "0"},
}
ORDER = list(SOURCES)


@pytest.mark.parametrize("winner", ORDER)
def test_discovery_order(winner):
    env = {}
    for name in ORDER[ORDER.index(winner):]:
        env.update(SOURCES[name])
    info = bs.discover(env)
    assert info.source == winner
    assert (info.rank, info.size) == (int(next(iter(SOURCES[winner].values()))), 6)


def test_no_variables_is_a_single_process():
    assert bs.discover({}) == RankInfo(0, 1, 0, 1, 0, 1, "single", True)


def test_own_variables_complete():
    env = {"PYHOROVOD_RANK": "3", "PYHOROVOD_SIZE": "4", "PYHOROVOD_LOCAL_RANK": "1",
           "PYHOROVOD_LOCAL_SIZE": "2", "PYHOROVOD_CROSS_RANK": "1", "PYHOROVOD_CROSS_SIZE": "2"}
    assert bs.discover(env) == RankInfo(3, 4, 1, 2, 1, 2, "pyhorovod", None)


def test_horovod_variables():
    env = {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "2"}
    assert bs.discover(env) == RankInfo(0, 2, 0, 2, 0, 1, "horovod", True)


def test_torchrun_variables():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert bs.discover(env) == RankInfo(3, 4, 1, 2, None, None, "torchrun", None)


def test_openmpi_variables_all_local():
    env = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "2",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}
    assert bs.discover(env) == RankInfo(2, 3, 2, 3, 0, 1, "openmpi", True)


def test_pmi_variables():
    env = {"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    assert bs.discover(env) == RankInfo(1, 4, 1, 2, None, None, "pmi", None)


def test_slurm_only_inside_a_step():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
           "SLURM_STEP_TASKS_PER_NODE": "2(x3),2", "SLURM_NODEID": "2"}
    assert bs.discover(env).source == "single"  # a batch script is not a step
    env["SLURM_STEP_ID"] = "0"
    assert bs.discover(env) == RankInfo(5, 8, 1, 2, None, None, "slurm", None)
    del env["SLURM_NTASKS"]
    env["SLURM_STEP_NUM_TASKS"] = "8"
    assert bs.discover(env).size == 8


@pytest.mark.parametrize("text,expected", [("4", [4]), ("2(x3)", [2, 2, 2]), ("2(x3),1", [2, 2, 2, 1]),
                                           ("1,3(x2),5", [1, 3, 3, 5])])
def test_slurm_tasks_per_node(text, expected):
    assert bs.parse_tasks_per_node(text) == expected


def test_slurm_tasks_per_node_bad_format():
    with pytest.raises(ValueError, match="SLURM_STEP_TASKS_PER_NODE"):
        bs.parse_tasks_per_node("2x3")


def test_generic_names_half_set_are_ignored():
    assert bs.discover({"RANK": "1"}).source == "single"
    assert bs.discover({"OMPI_COMM_WORLD_SIZE": "2"}).source == "single"


@pytest.mark.parametrize("env,var", [
    ({"PYHOROVOD_RANK": "1"}, "PYHOROVOD_SIZE"),
    ({"HOROVOD_SIZE": "2"}, "HOROVOD_RANK"),
    ({"PYHOROVOD_RANK": "one", "PYHOROVOD_SIZE": "2"}, "PYHOROVOD_RANK"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3"}, "LOCAL_WORLD_SIZE"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "x"},
     "OMPI_COMM_WORLD_LOCAL_RANK"),
])
def test_invalid_rank_variables_name_the_variable(env, var):
    with pytest.raises(ValueError, match=var):
        bs.discover(env)


def test_winning_source_is_logged_at_debug(caplog):
    with caplog.at_level(logging.DEBUG, logger="pyhorovod"):
        bs.discover(SOURCES["openmpi"])
    assert any("openmpi" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)


def test_derive_topology_two_uneven_hosts():
    entries = [("a", None), ("a", None), ("b", None), ("b", None), ("b", None)]
    got = [bs.derive_topology(r, entries, RankInfo(r, 5, source="x")) for r in range(5)]
    assert [(i.local_rank, i.local_size) for i in got] == [(0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]
    # cross groups: local rank 0 -> ranks [0, 2]; 1 -> [1, 3]; 2 -> [4]
    assert [(i.cross_rank, i.cross_size) for i in got] == [(0, 2), (0, 2), (1, 2), (1, 2), (0, 1)]
    assert not any(i.homogeneous for i in got)


def test_derive_topology_round_robin_placement_keeps_given_values():
    entries = [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    info = bs.derive_topology(2, entries, RankInfo(2, 4, local_rank=1, local_size=2, source="openmpi"))
    assert (info.local_rank, info.local_size, info.cross_rank, info.cross_size) == (1, 2, 0, 2)
    assert info.homogeneous is True


def test_secret_from_variable_and_file(tmp_path):
    assert rv.read_secret({}) is None
    assert rv.read_secret({"PYHOROVOD_SECRET": "abc"}) == b"abc"
    path = tmp_path / "secret"
    path.write_bytes(b"f00d\n")
    assert rv.read_secret({"PYHOROVOD_SECRET_FILE": str(path)}) == b"f00d"
    with pytest.raises(ValueError, match="PYHOROVOD_SECRET_FILE"):
        rv.read_secret({"PYHOROVOD_SECRET_FILE": str(tmp_path / "missing")})


def _locate(env):
    return rv.locate(bs.discover(env), Config.from_env(env), env)


@pytest.mark.parametrize("env,pattern", [
    (SOURCES["pyhorovod"], "PYHOROVOD_STORE_ADDR"),
    (SOURCES["slurm"], "PYHOROVOD_STORE_ADDR"),
    (SOURCES["torchrun"], "MASTER_ADDR"),
    ({**SOURCES["horovod"], "PYHOROVOD_STORE_ADDR": "127.0.0.1"}, "PYHOROVOD_STORE_PORT"),
    ({**SOURCES["horovod"], "PYHOROVOD_STORE_ADDR": "127.0.0.1", "PYHOROVOD_STORE_PORT": "5"},
     "PYHOROVOD_SECRET"),
    ({**SOURCES["horovod"], "PYHOROVOD_STORE_ADDR": "127.0.0.1", "PYHOROVOD_STORE_PORT": "70000",
      "PYHOROVOD_SECRET": "s"}, "PYHOROVOD_STORE_PORT"),
])
def test_missing_rendezvous_says_what_to_set(env, pattern):
    with pytest.raises(ValueError, match=pattern):
        _locate(env)


def test_external_store_from_launcher_or_horovod_names():
    env = {**SOURCES["pyhorovod"], "PYHOROVOD_STORE_ADDR": "localhost", "PYHOROVOD_STORE_PORT": "4321",
           "PYHOROVOD_SECRET": "k"}
    r = _locate(env)
    assert (r.host, r.port, r.secret, r.how, r.server) == ("127.0.0.1", 4321, b"k", "external", None)
    env = {**SOURCES["horovod"], "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
           "HOROVOD_GLOO_RENDEZVOUS_PORT": "99", "PYHOROVOD_SECRET": "k"}
    assert (_locate(env).port, _locate(env).how) == (99, "external")


def test_single_process_hosts_a_private_store():
    r = _locate({})
    try:
        assert r.how == "private" and r.host == "127.0.0.1" and r.port > 0 and len(r.secret) >= 16
    finally:
        r.close()


def test_bind_address_rules():
    assert rv.bind_address(4, 4, "eth-does-not-matter", None) == "127.0.0.1"  # all local: loopback
    assert rv.bind_address(2, 4, "lo", None) == "127.0.0.1"                 # the interface's address
    assert rv.bind_address(None, 4, None, "127.0.0.1") == "127.0.0.1"       # route towards the store
    with pytest.raises(ValueError, match="IFACE"):
        rv.bind_address(2, 4, "nosuchif0", None)
    assert rv.route_address() != "0.0.0.0"


# ------------------------------------------------------------------ real inits (multi-process)

def torchrun_body():
    import numpy as np

    import pyhorovod as hvd
    hvd.init()
    out = hvd.allreduce(np.array([hvd.rank() + 1], np.int64), op=hvd.Sum)
    info = [hvd.rank_source(), hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
            hvd.cross_size(), int(out[0])]
    hvd.shutdown()
    return info


def test_init_under_torchrun_variables():
    results = run_ranks(torchrun_body, 3, launcher="torchrun", timeout=60)
    assert [r.value for r in results] == [["torchrun", r, 3, r, 3, 0, 1, 6] for r in range(3)]


def topology_body():
    import pyhorovod as hvd
    hvd.init()
    return [hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(), hvd.is_homogeneous()]


def test_topology_derived_from_hostnames():
    # Hosts a, a, b, b, b (simulated); no local variables given, so they come from the store exchange.
    def env(r):
        return {"PYHOROVOD_HOSTNAME": "ab"[r >= 2], "PYHOROVOD_LOCAL_RANK": None, "PYHOROVOD_LOCAL_SIZE": None}
    results = run_ranks(topology_body, 5, env=env, timeout=60)
    assert [r.value for r in results] == [[0, 2, 0, 2, False], [1, 2, 0, 2, False], [0, 3, 1, 2, False],
                                          [1, 3, 1, 2, False], [2, 3, 0, 1, False]]
