"""Exact checks of pyhorovod.scaling.cost_model: every formula against a hand computation."""
import json

import pytest

from pyhorovod.scaling import cost_model as cm

NET = cm.Network(alpha_s=1e-5, beta_bytes_per_s=1e9)
M = 1e6          # 1 MB: M/beta = 1 ms
A, MB = 1e-5, 1e-3   # alpha, M/beta


def close(x, y):
    return x == pytest.approx(y, rel=1e-12, abs=1e-15)


def test_ring_formula():
    assert close(cm.ring_allreduce_time(M, 4, NET), 2 * 3 * A + 2 * 3 / 4 * MB)     # 1.56e-3
    assert close(cm.ring_allreduce_time(M, 4, NET), 1.56e-3)
    assert cm.ring_allreduce_time(M, 1, NET) == 0.0
    g = cm.Network(1e-5, 1e9, gamma_s_per_byte=1e-10)
    assert close(cm.ring_allreduce_time(M, 2, g), 2 * A + MB + 0.5 * M * 1e-10)


def test_ring_bandwidth_term_flattens():
    net = cm.Network(0.0, 1e9)
    # 2(p-1)/p: 1 at p=2, 255/128 at p=256 -- less than 2x for 128x the workers
    assert close(cm.ring_allreduce_time(M, 256, net) / cm.ring_allreduce_time(M, 2, net), 255 / 128)


def test_recursive_doubling():
    assert close(cm.recursive_doubling_time(M, 8, NET), 3 * (A + MB))
    assert close(cm.recursive_doubling_time(M, 2, NET), A + MB)
    # p = 6: 2 rounds among 4 ranks, plus fold-in and fold-out of the 2 extra ranks
    assert close(cm.recursive_doubling_time(M, 6, NET), 4 * (A + MB))
    assert cm.recursive_doubling_time(M, 1, NET) == 0.0


def test_tree():
    assert close(cm.tree_allreduce_time(M, 2, NET), 2 * (A + MB))
    assert close(cm.tree_allreduce_time(M, 8, NET), 6 * (A + 2 * MB))
    assert close(cm.tree_allreduce_time(M, 5, NET), 6 * (A + 2 * MB))   # ceil(log2 5) = 3 levels


def test_parameter_server_dedicated():
    assert close(cm.parameter_server_time(M, 8, NET), 2 * A + 2 * 8 * MB)           # one server takes 8M
    assert close(cm.parameter_server_time(M, 8, NET, servers=8), 2 * A + 2 * MB)     # workers' NICs bound
    assert close(cm.parameter_server_time(M, 8, NET, servers=2), 2 * A + 2 * 4 * MB)
    # 2 workers per host: a worker host moves 2M each way
    assert close(cm.parameter_server_time(M, 8, NET, servers=8, workers_per_host=2), 2 * A + 2 * 2 * MB)


def test_parameter_server_colocated():
    # one worker per host, a server on every host: each NIC moves 7/8 M out (push) and 7/8 M in
    assert close(cm.parameter_server_time(M, 8, NET, servers=8, colocated=True), 2 * A + 2 * 7 / 8 * MB)
    # one colocated server: it takes in 7M; the other hosts push M
    assert close(cm.parameter_server_time(M, 8, NET, servers=1, colocated=True), 2 * A + 2 * 7 * MB)
    # Horovod-paper layout: 32 hosts x 4 GPUs, a server on each host: max(4M*31/32, 124M/32) = 3.875M
    assert close(cm.parameter_server_time(M, 128, NET, servers=32, colocated=True, workers_per_host=4),
                 2 * A + 2 * 3.875 * MB)
    assert cm.parameter_server_time(M, 4, NET, servers=1, colocated=True, workers_per_host=4) == 0.0


def test_parameter_server_grows_ring_does_not():
    net = cm.Network(0.0, 1e9)
    ps = [cm.parameter_server_time(M, p, net) for p in (2, 4, 8)]
    assert close(ps[1] / ps[0], 2.0) and close(ps[2] / ps[0], 4.0)
    ring = [cm.ring_allreduce_time(M, p, net) for p in (2, 4, 8)]
    assert close(ring[2] / ring[0], 1.75)


def test_bad_arguments():
    with pytest.raises(ValueError):
        cm.Network(-1.0, 1e9)
    with pytest.raises(ValueError):
        cm.Network(0.0, 0.0)
    with pytest.raises(ValueError):
        cm.ring_allreduce_time(-1, 2, NET)
    with pytest.raises(ValueError):
        cm.ring_allreduce_time(M, 0, NET)
    with pytest.raises(ValueError):
        cm.parameter_server_time(M, 6, NET, workers_per_host=4)
    with pytest.raises(ValueError):
        cm.parameter_server_time(M, 8, NET, servers=5, colocated=True, workers_per_host=2)
    with pytest.raises(ValueError):
        cm.allreduce_time("butterfly", M, 4, NET)
    with pytest.raises(ValueError):
        cm.StepModel(compute_s=0.0, grad_bytes=M)


def test_buckets():
    assert cm.bucket_sizes(10, 4) == [4, 4, 2]
    assert cm.bucket_sizes(10, 0) == [10]
    assert cm.bucket_sizes(10, 64) == [10]
    assert cm.bucket_sizes(0, 4) == []


def test_step_time_without_overlap():
    step = cm.StepModel(compute_s=3.0, grad_bytes=4.0, backward_fraction=2 / 3, fusion_bytes=1.0)
    assert close(cm.step_time(step, lambda b: 1.0 * b, overlap=False), 3.0 + 4.0)
    step2 = cm.StepModel(3.0, 4.0, 2 / 3, 1.0, per_call_overhead_s=0.5)
    assert close(cm.step_time(step2, lambda b: 1.0 * b, overlap=False), 3.0 + 4 * 1.5)


def test_step_time_with_overlap():
    # t_f = 1, t_b = 2; four 1-byte buckets ready at 1.5, 2.0, 2.5, 3.0
    step = cm.StepModel(compute_s=3.0, grad_bytes=4.0, backward_fraction=2 / 3, fusion_bytes=1.0)
    # fast network: every bucket done 0.25 s after it is ready; the last ends at 3.25
    assert close(cm.step_time(step, lambda b: 0.25 * b, overlap=True), 3.25)
    # slow network: buckets queue up: 1.5-2.5, 2.5-3.5, 3.5-4.5, 4.5-5.5
    assert close(cm.step_time(step, lambda b: 1.0 * b, overlap=True), 5.5)
    # no communication at all: the step is just compute
    assert close(cm.step_time(step, lambda b: 0.0, overlap=True), 3.0)


def test_efficiency():
    step = cm.StepModel(compute_s=0.1, grad_bytes=M, fusion_bytes=0)
    assert cm.scaling_efficiency(step, "ring", 1, NET, overlap=False) == 1.0
    t = cm.ring_allreduce_time(M, 4, NET)
    assert close(cm.scaling_efficiency(step, "ring", 4, NET, overlap=False), 0.1 / (0.1 + t))
    ps = cm.scaling_efficiency(step, "parameter_server", 4, NET, overlap=False, servers=1)
    assert close(ps, 0.1 / (0.1 + 2 * A + 2 * 4 * MB))


def test_fit_recovers_exact_parameters():
    truth = cm.Network(2.5e-5, 3.0e9)
    pts = [(p, m, cm.ring_allreduce_time(m, p, truth)) for p in (2, 3, 4) for m in (4.0, 1 << 20, 64 << 20)]
    net, worst = cm.fit_ring(pts)
    assert net.alpha_s == pytest.approx(2.5e-5, rel=1e-9)
    assert net.beta_bytes_per_s == pytest.approx(3.0e9, rel=1e-9)
    assert worst < 1e-9


def test_fit_pins_negative_alpha_at_zero():
    # pure bandwidth data with a little noise that would make the free alpha negative
    pts = [(2, 1e6, 1e-3 * 0.99), (2, 4e6, 4e-3), (2, 16e6, 16e-3 * 1.01)]
    net, _ = cm.fit_ring(pts)
    assert net.alpha_s >= 0.0
    assert net.beta_bytes_per_s == pytest.approx(1e9, rel=0.02)
    with pytest.raises(ValueError):
        cm.fit_ring([(2, 1e6, 1e-3)])
    with pytest.raises(ValueError):
        cm.fit_ring([(1, 1e6, 1e-3), (2, 1e6, 1e-3)])


def test_points_from_collectives_json(tmp_path):
    obj = {"results": [
        {"cand": "core", "op": "allreduce", "n": 2, "bytes": 1024, "time_s": 1e-4},
        {"cand": "core", "op": "allreduce", "n": 4, "bytes": 1 << 20, "time_s": 1e-3},
        {"cand": "core", "op": "allgather", "n": 2, "bytes": 1024, "time_s": 1e-4},
        {"cand": "mpi", "op": "allreduce", "n": 2, "bytes": 1024, "time_s": 2e-4}]}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(obj))
    assert cm.points_from_collectives_json(str(path), "core") == [(2, 1024.0, 1e-4), (4, float(1 << 20), 1e-3)]
    assert cm.points_from_collectives_json(obj, "core", min_bytes=4096) == [(4, float(1 << 20), 1e-3)]


def test_best_servers():
    net = cm.Network(0.0, 1e9)
    # dedicated servers: time falls until S = p (then workers' NICs bound); the first minimum wins
    assert cm.best_servers(M, 8, net) == 8
    assert cm.best_servers(M, 8, net, candidates=[1, 2, 4]) == 4


# ---- hosts, hierarchy, compression

INTRA = cm.Network(alpha_s=2e-6, beta_bytes_per_s=1e10)
INTER = cm.Network(alpha_s=5e-5, beta_bytes_per_s=1.25e8)


def test_flat_ring_on_a_cluster_runs_at_the_nic():
    c = cm.Cluster(2, 2, INTRA, INTER)
    assert close(cm.flat_ring_time(M, c), 2 * 3 * 5e-5 + 2 * 3 / 4 * M / 1.25e8)
    one_host = cm.Cluster(1, 4, INTRA, INTER)
    assert close(cm.flat_ring_time(M, one_host), 2 * 3 * 2e-6 + 2 * 3 / 4 * M / 1e10)


def test_flat_small_is_recursive_doubling_host_by_host():
    """Below the engine's small-message threshold the flat allreduce is recursive doubling: log2 g
    exchanges of M inside the host, then log2 H across, where all g workers of a host send M at once."""
    c = cm.Cluster(2, 2, INTRA, INTER)
    m = 65536
    inside = 1 * (2e-6 + m / 1e10)
    across = 1 * (5e-5 + 2 * m / 1.25e8)
    assert close(cm.flat_small_time(m, c), inside + across)
    c8 = cm.Cluster(4, 2, INTRA, INTER)   # ceil(log2 4) = 2 rounds across
    assert close(cm.flat_small_time(m, c8), inside + 2 * across)
    assert close(cm.flat_allreduce_time(m, c, small_threshold_bytes=m + 1), cm.flat_small_time(m, c))
    assert close(cm.flat_allreduce_time(m, c, small_threshold_bytes=m), cm.flat_ring_time(m, c))
    assert close(cm.flat_allreduce_time(m, c), cm.flat_ring_time(m, c))
    assert cm.auto_allreduce_time(m, c, small_threshold_bytes=m + 1) == min(
        cm.flat_small_time(m, c), cm.hierarchical_allreduce_time(m, c))


def test_hierarchical_formula_by_hand():
    c = cm.Cluster(2, 2, INTRA, INTER)
    local = 2 * 1 * 2e-6 + 2 * 1 / 2 * M / 1e10      # reduce-scatter + allgather inside the host
    cross = 2 * 1 * 5e-5 + 2 * 1 / 2 * M / 1.25e8    # the NIC carries 2(H-1)/H M for both shards
    assert close(cm.hierarchical_allreduce_time(M, c), local + cross)
    c3 = cm.Cluster(3, 4, INTRA, INTER)
    assert close(cm.hierarchical_allreduce_time(M, c3), 2 * 3 * 2e-6 + 2 * 3 / 4 * M / 1e10
                 + 2 * 2 * 5e-5 + 2 * 2 / 3 * M / 1.25e8)
    # One host: only the local ring; one rank per host: only the cross ring (= the flat ring).
    assert close(cm.hierarchical_allreduce_time(M, cm.Cluster(1, 4, INTRA, INTER)),
                 cm.flat_ring_time(M, cm.Cluster(1, 4, INTRA, INTER)))
    assert close(cm.hierarchical_allreduce_time(M, cm.Cluster(4, 1, INTRA, INTER)),
                 cm.flat_ring_time(M, cm.Cluster(4, 1, INTRA, INTER)))


def test_hierarchical_saves_the_traffic_ratio_when_the_nic_is_the_bottleneck():
    free_intra = cm.Network(0.0, 1e18)
    c = cm.Cluster(2, 2, free_intra, cm.Network(0.0, 1e8))
    assert cm.flat_ring_time(M, c) / cm.hierarchical_allreduce_time(M, c) == pytest.approx(1.5, rel=1e-9)
    assert cm.auto_allreduce_time(M, c) == cm.hierarchical_allreduce_time(M, c)
    # With latency dominating (tiny message, slow local hops) the flat ring wins and auto takes it.
    slow_local = cm.Cluster(2, 2, cm.Network(1e-3, 1e10), cm.Network(1e-6, 1e8))
    assert cm.auto_allreduce_time(8, slow_local) == cm.flat_ring_time(8, slow_local) < \
        cm.hierarchical_allreduce_time(8, slow_local)


def test_compressed_allreduce_is_fewer_bytes_plus_compute():
    ring = lambda b: cm.ring_allreduce_time(b, 4, NET)  # noqa: E731
    fp16 = cm.Compression(0.5, compute_s_per_byte=1e-11)
    assert close(cm.compressed_allreduce_time(M, ring, fp16), ring(M / 2) + M * 1e-11)
    psgd = cm.Compression(0.01, messages=2)
    assert close(cm.compressed_allreduce_time(M, ring, psgd), 2 * ring(M * 0.01 / 2))
    assert cm.compressed_allreduce_time(0, ring, psgd) == 0.0
    assert close(cm.compressed_allreduce_time(M, ring, cm.NO_COMPRESSION), ring(M))


def test_cluster_step_efficiency():
    step = cm.StepModel(compute_s=0.1, grad_bytes=M, fusion_bytes=0)
    c = cm.Cluster(2, 2, INTRA, INTER)
    t = cm.hierarchical_allreduce_time(M, c)
    assert close(cm.cluster_step_efficiency(step, c, "hierarchical", overlap=False), 0.1 / (0.1 + t))
    assert close(cm.cluster_step_efficiency(step, c, "flat", overlap=False), 0.1 / (0.1 + cm.flat_ring_time(M, c)))
    assert cm.cluster_step_efficiency(step, cm.Cluster(1, 1, INTRA, INTER)) == 1.0
    half = cm.Compression(0.5)
    assert cm.cluster_step_efficiency(step, c, "auto", half, overlap=False) > \
        cm.cluster_step_efficiency(step, c, "auto", overlap=False)


def test_cluster_bad_input():
    with pytest.raises(ValueError, match="hosts"):
        cm.Cluster(0, 2, INTRA, INTER)
    with pytest.raises(ValueError, match="ratio"):
        cm.Compression(0.0)
    with pytest.raises(ValueError, match="ratio"):
        cm.Compression(0.5, messages=0)
    with pytest.raises(ValueError, match="algorithm"):
        cm.cluster_step_efficiency(cm.StepModel(0.1, M), cm.Cluster(2, 2, INTRA, INTER), "torus")
    with pytest.raises(ValueError, match="size"):
        cm.hierarchical_allreduce_time(-1, cm.Cluster(2, 2, INTRA, INTER))
