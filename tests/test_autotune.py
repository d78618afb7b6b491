"""Autotune (pyhorovod/_autotune.py): the search's trial sequence, every rank applying the same settings
in the same order, and rank 0's CSV log."""
import csv

import pytest

from mp import run_ranks
from pyhorovod._autotune import FIELDS, GRID, CoordinateSearch

START = {"fusion_threshold_bytes": 128 << 20, "cycle_time_ms": 1.0, "hierarchical_allreduce": -1, "segment_bytes": 0}


def test_coordinate_search_walks_each_knob_with_the_others_at_their_best():
    s = CoordinateSearch(START, ["fusion_threshold_bytes", "cycle_time_ms"], max_trials=100)
    # Score: fusion 4 MiB is best, and cycle time 5 ms; every other value scores lower.

    def score(c):
        return (10 if c["fusion_threshold_bytes"] == 4 << 20 else 1) + (5 if c["cycle_time_ms"] == 5.0 else 0)
    seen = []
    nxt = s.current
    while nxt is not None:
        seen.append(dict(nxt))
        nxt = s.report(score(nxt))
    fusion_tries = [c["fusion_threshold_bytes"] for c in seen[:len(GRID["fusion_threshold_bytes"])]]
    assert fusion_tries == [128 << 20] + [v for v in GRID["fusion_threshold_bytes"] if v != 128 << 20]
    # Cycle times are tried at the best fusion threshold found.
    rest = seen[len(GRID["fusion_threshold_bytes"]):]
    assert [c["cycle_time_ms"] for c in rest] == [v for v in GRID["cycle_time_ms"] if v != 1.0]
    assert all(c["fusion_threshold_bytes"] == 4 << 20 for c in rest)
    assert s.done and s.best == dict(START, fusion_threshold_bytes=4 << 20, cycle_time_ms=5.0)
    assert s.current == s.best


def test_coordinate_search_stops_after_max_trials_at_the_best_so_far():
    s = CoordinateSearch(START, list(FIELDS), max_trials=3)
    scores = iter([1.0, 3.0, 2.0])
    nxt, n = s.current, 0
    while nxt is not None:
        nxt = s.report(next(scores))
        n += 1
    assert n == 3 and s.done
    assert s.best == dict(START, fusion_threshold_bytes=GRID["fusion_threshold_bytes"][0])


def body_train(log_path, steps):
    import torch
    import pyhorovod.torch as hvd
    from pyhorovod import _autotune
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    tuner = _autotune.current()
    # The weights stay identical on every rank whatever the settings were.
    w = [p.detach().sum().item() for p in model.parameters()]
    hvd.shutdown()
    return {"applied": tuner.applied, "done": tuner.search.done, "best": tuner.search.best, "weights": w}


@pytest.mark.parametrize("hosts", [[0, 0], [0, 0, 1, 1]], ids=["1x2", "2x2"])
def test_autotune_every_rank_applies_the_same_trials_and_rank0_logs_them(tmp_path, hosts):
    log_path = str(tmp_path / "autotune.csv")
    trials, per_sample, warmup = 5, 2, 1

    def env(r):
        h = hosts[r]
        return {"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": log_path,
                "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": str(warmup), "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": str(per_sample),
                "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": str(trials), "PYHOROVOD_HOSTNAME": f"host{h}",
                "PYHOROVOD_LOCAL_RANK": str(hosts[:r].count(h)), "PYHOROVOD_LOCAL_SIZE": str(hosts.count(h)),
                "PYHOROVOD_CROSS_RANK": str(h), "PYHOROVOD_CROSS_SIZE": str(len(set(hosts)))}
    steps = (warmup + trials) * per_sample + 3
    results = run_ranks(body_train, len(hosts), timeout=240, env=env, args=(log_path, steps))
    first = results[0].value
    for r in results:
        assert r.value["done"]
        assert r.value["applied"] == first["applied"]
        assert r.value["best"] == first["best"]
        assert r.value["weights"] == first["weights"]
    # 1 warm-up sample (the start setting again), then one setting per trial, the last being the kept one.
    assert len(first["applied"]) == warmup + trials
    assert first["applied"][-1] == first["best"]
    with open(log_path) as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["trial"] + FIELDS + ["steps", "seconds", "steps_per_second"]
    body, final = rows[1:-1], rows[-1]
    assert [row[0] for row in body] == [str(i) for i in range(1, trials + 1)]
    assert all(int(row[5]) == per_sample for row in body)
    best_row = max(body, key=lambda row: float(row[7]))
    assert final[0] == "final"
    assert [float(v) for v in final[1:5]] == [float(v) for v in best_row[1:5]]
    assert [float(first["best"][k]) for k in FIELDS] == [float(v) for v in final[1:5]]
    # The trials walk fusion thresholds first (the search's order), from the configured start.
    assert [float(row[1]) for row in body] == [float(v) for v in GRID["fusion_threshold_bytes"][-1:] +
                                               GRID["fusion_threshold_bytes"][:trials - 1]]
