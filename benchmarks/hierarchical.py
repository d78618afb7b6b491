"""Flat ring versus hierarchical allreduce versus the engine's automatic choice, on an emulated cluster:
H network namespaces (tests/netns.py) with R ranks each, every host's link shaped by tbf. One job runs
all three interleaved: each round switches the mode on every rank at the same point (Engine.set_knobs
right after a barrier), in a rotating order, and times `--reps` allreduces of `--size` bytes (float32,
one barrier before each). The job starts in automatic mode, so the engine fits its model at init; the
fit and its predictions for --size are reported next to the medians.

    flock /tmp/bench.lock python3 benchmarks/hierarchical.py --hosts 2 --per-host 2 --rate-mbit 1000 \\
        --size 16M --rounds 7 --json benchmarks/results/hierarchical_2x2_1g.json

Needs root and iproute2 (network namespaces). Ratios: hierarchical/flat speed-up, and auto's median over
the better of the two (goal: hierarchical >= 1.3x flat; auto <= 1.05x the better one).
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "tests")]

from common import arg_parser, fmt_size, parse_size, print_table, write_result  # noqa: E402

MODES = {"flat": 0, "hierarchical": 1, "auto": -1}


def worker(sizes, rounds: int, reps: int) -> None:
    import numpy as np
    import pyhorovod as hvd
    from pyhorovod import basics
    hvd.init()
    engine = basics._state.engine
    names = list(MODES)
    times = {}
    for size_bytes in sizes:
        x = np.ones(size_bytes // 4, dtype=np.float32)
        for _ in range(2):
            hvd.allreduce(x, op=hvd.Sum, name="warm")
        times[str(size_bytes)] = t = {m: [] for m in names}
        # Small sizes take microseconds to milliseconds: more repetitions, so noise averages out.
        n = min(50, max(reps, reps * (16 << 20) // max(size_bytes, 1)))
        for rnd in range(rounds):
            order = names[rnd % 3:] + names[:rnd % 3]
            for mode in order:
                hvd.barrier()
                engine.set_knobs(hierarchical_allreduce=MODES[mode])
                for _ in range(n):
                    hvd.barrier()
                    t0 = time.perf_counter()
                    hvd.allreduce(x, op=hvd.Sum, name="timed")
                    t[mode].append(time.perf_counter() - t0)
    info = engine.hierarchy()
    hvd.shutdown()
    print("RESULT " + json.dumps({"times": times,
                                  "hierarchy": {k: info[k] for k in ("host_of", "flat", "local", "cross",
                                                                     "two_level_from_bytes")}}),
          flush=True)


def predicted(h, hosts, per_host, m):
    """The engine's model (csrc/algorithms/hierarchy.h) for the algorithms each mode runs at m bytes: the
    ring, or recursive doubling below the small-message threshold (flat over p ranks, the cross phase
    over the hosts); alphas floored at the default tuning's per-hop latencies, as the engine's choice is."""
    from pyhorovod import _core
    tuning = _core.Tuning()
    floor = {"flat": tuning.alpha_s, "cross": tuning.alpha_s, "local": tuning.alpha_shm_s}
    fits = {k: (max(h[k][0], floor[k]), h[k][1]) for k in floor}

    def ring(fit, n, b):
        a, beta = fit
        return 0.0 if n <= 1 or beta <= 0 else 2 * (n - 1) * a + 2 * (n - 1) / n * b / beta

    def doubling(fit, n, b):
        a, beta = fit
        return 0.0 if n <= 1 or beta <= 0 else (n - 1).bit_length() * (a + b / beta)

    def flat_alg(fit, n, b):
        return doubling(fit, n, b) if b < _core.small_message_threshold(tuning, n) else ring(fit, n, b)

    p = hosts * per_host
    if m < _core.small_message_threshold(tuning, p):
        flat = doubling(fits["local"], per_host, m) + doubling(fits["cross"], hosts, m)
    else:
        flat = ring(fits["flat"], p, m)
    hierarchical = ring(fits["local"], per_host, m) + flat_alg(fits["cross"], hosts, m / per_host)
    return {"flat": flat, "hierarchical": hierarchical}


def main():
    p = arg_parser(__doc__)
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--per-host", type=int, default=2)
    p.add_argument("--rate-mbit", type=float, default=1000)
    p.add_argument("--size", default="16M", help="comma-separated sizes")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", default="")
    p.add_argument("--worker", action="store_true", help=argparse_hidden())
    a = p.parse_args()
    sizes = [parse_size(x) for x in a.size.split(",")]
    if a.worker:
        worker(sizes, a.rounds, a.reps)
        return
    from netns import Network, cleanup_stale, netns_unavailable_reason
    from netns_ranks import run_job
    reason = netns_unavailable_reason()
    if reason:
        sys.exit(f"hierarchical.py: {reason}")
    cleanup_stale()
    with Network(hosts=a.hosts) as net:
        for h in net.hosts:
            h.shape("hv0", rate_mbit=a.rate_mbit)
        cmd = ["python3", os.path.abspath(__file__), "--worker", "--size", ",".join(map(str, sizes)),
               "--rounds", str(a.rounds), "--reps", str(a.reps)]
        rows = run_job(net, a.per_host, cmd, timeout=600)
    fit = rows[0]["hierarchy"]
    print(f"{a.hosts} hosts x {a.per_host} ranks, {a.rate_mbit:g} Mbit/s, {a.rounds} rounds x {a.reps} per mode")
    print("model fit (alpha s, beta B/s):", json.dumps(fit))
    out = {"hosts": a.hosts, "per_host": a.per_host, "rate_mbit": a.rate_mbit, "fit": fit, "sizes": {}}
    table = []
    for size in sizes:
        # A rank's time is when its allreduce returned; the collective's time is the slowest rank's.
        t = [r["times"][str(size)] for r in rows]
        per_mode = {m: [max(x[m][i] for x in t) for i in range(len(t[0][m]))] for m in MODES}
        med = {m: statistics.median(v) for m, v in per_mode.items()}
        pred = predicted(fit, a.hosts, a.per_host, size)
        best = min(med["flat"], med["hierarchical"])
        ratios = {"hierarchical_speedup": med["flat"] / med["hierarchical"], "auto_over_best": med["auto"] / best}
        table.append([fmt_size(size), f"{med['flat'] * 1e3:.2f}", f"{med['hierarchical'] * 1e3:.2f}",
                      f"{med['auto'] * 1e3:.2f}", f"{pred['flat'] * 1e3:.2f}", f"{pred['hierarchical'] * 1e3:.2f}",
                      f"{ratios['hierarchical_speedup']:.2f}", f"{ratios['auto_over_best']:.3f}"])
        out["sizes"][str(size)] = {"times": per_mode, "median_s": med, "model_s": pred, "ratios": ratios}
    print_table(["size", "flat ms", "hier ms", "auto ms", "model flat", "model hier", "hier speed-up",
                 "auto/best"], table)
    print("goals: hierarchical speed-up >= 1.3 at 16 MiB; auto/best <= 1.05 at every size")
    if a.json:
        write_result(a.json, out)


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
