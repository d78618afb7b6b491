"""Autotune against hand-picked fusion thresholds and cycle times, on the example CNN
(examples/fashion_mnist.py's Net, synthetic Fashion-MNIST-shaped batches) on an emulated cluster: H
network namespaces x R ranks (tests/netns.py), links shaped by tbf.

One job: first autotune runs (HOROVOD_AUTOTUNE=1 with the --steps-per-sample / --warmup / --max-samples
given) until it has fixed its setting; then every hand-picked (fusion threshold, cycle time) pair of the
grid and the autotuned setting are timed interleaved -- `--rounds` rounds, each timing `--steps` steps of
every setting in a rotating order (Engine.set_knobs on every rank right after a barrier). Hand-picked
settings keep the other knobs at their defaults (hierarchy automatic, segments from the model).

    flock /tmp/bench.lock python3 benchmarks/autotune_cnn.py --hosts 2 --per-host 2 --rate-mbit 1000 \\
        --json benchmarks/results/autotune_cnn_2x2_1g.json

Goal: the autotuned setting's median step time within 5% of the best hand-picked one.
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "tests"), os.path.join(ROOT, "examples")]

from common import arg_parser, print_table, write_result  # noqa: E402

FUSIONS = [0, 1 << 20, 4 << 20, 16 << 20, 128 << 20]
CYCLES = [0.5, 1.0, 5.0]


def worker(rounds, steps, batch):
    import torch
    import pyhorovod.torch as hvd
    from pyhorovod import _autotune, basics
    from fashion_mnist import Net
    torch.set_num_threads(1)
    hvd.init()
    engine = basics._state.engine
    torch.manual_seed(hvd.rank())
    model = Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    tune_steps = 0
    t0 = time.perf_counter()
    while _autotune.current() is None or not _autotune.current().search.done:
        step()
        tune_steps += 1
    tune_s = time.perf_counter() - t0
    tuned = {k: float(v) for k, v in _autotune.current().search.best.items()}
    settings = {f"fusion={f >> 20}MiB cycle={c:g}ms": {"fusion_threshold_bytes": f, "cycle_time_ms": c,
                                                       "hierarchical_allreduce": -1, "segment_bytes": 0}
                for f in FUSIONS for c in CYCLES}
    settings["autotuned"] = tuned
    names = list(settings)
    times = {n: [] for n in names}
    for rnd in range(rounds):
        k = rnd * 5 % len(names)
        for n in names[k:] + names[:k]:
            s = settings[n]
            hvd.barrier()
            engine.set_knobs(fusion_threshold_bytes=int(s["fusion_threshold_bytes"]), cycle_time_ms=s["cycle_time_ms"],
                             hierarchical_allreduce=int(s["hierarchical_allreduce"]),
                             segment_bytes=int(s["segment_bytes"]))
            step()  # the first step under new knobs may still mix old ones in flight
            hvd.barrier()
            t = time.perf_counter()
            for _ in range(steps):
                step()
            times[n].append((time.perf_counter() - t) / steps)
    hvd.shutdown()
    print("RESULT " + json.dumps({"times": times, "tuned": tuned, "tune_steps": tune_steps, "tune_s": tune_s,
                                  "settings": settings}), flush=True)


def main():
    p = arg_parser(__doc__)
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--per-host", type=int, default=2)
    p.add_argument("--rate-mbit", type=float, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps-per-sample", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--max-samples", type=int, default=20)
    p.add_argument("--json", default="")
    p.add_argument("--worker", action="store_true")
    a = p.parse_args()
    if a.worker:
        worker(a.rounds, a.steps, a.batch)
        return
    from netns import Network, cleanup_stale, netns_unavailable_reason
    from netns_ranks import run_job
    reason = netns_unavailable_reason()
    if reason:
        sys.exit(f"autotune_cnn.py: {reason}")
    cleanup_stale()
    env = {"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": str(a.steps_per_sample),
           "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": str(a.warmup),
           "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": str(a.max_samples),
           "HOROVOD_AUTOTUNE_LOG": "/tmp/pyhorovod_autotune_cnn.csv"}
    with Network(hosts=a.hosts) as net:
        for h in net.hosts:
            h.shape("hv0", rate_mbit=a.rate_mbit)
        cmd = ["python3", os.path.abspath(__file__), "--worker", "--rounds", str(a.rounds), "--steps", str(a.steps),
               "--batch", str(a.batch)]
        rows = run_job(net, a.per_host, cmd, timeout=900, env=env)
    r0 = rows[0]
    # A setting's step time: the slowest rank's, per round; then the median over rounds.
    med = {n: statistics.median(max(r["times"][n][i] for r in rows) for i in range(a.rounds)) for n in r0["times"]}
    hand = {n: v for n, v in med.items() if n != "autotuned"}
    best = min(hand, key=hand.get)
    table = [[n, f"{v * 1e3:.2f}", f"{v / hand[best]:.3f}"] for n, v in sorted(med.items(), key=lambda kv: kv[1])]
    print(f"{a.hosts} hosts x {a.per_host} ranks, {a.rate_mbit:g} Mbit/s, example CNN, batch {a.batch}/rank; "
          f"autotune took {r0['tune_steps']} steps ({r0['tune_s']:.1f} s) and kept {json.dumps(r0['tuned'])}")
    print_table(["setting", "median step ms", "vs best hand-picked"], table)
    ratio = med["autotuned"] / hand[best]
    print(f"autotuned / best hand-picked ({best}): {ratio:.3f} (goal <= 1.05)")
    with (open("/tmp/pyhorovod_autotune_cnn.csv") if os.path.exists("/tmp/pyhorovod_autotune_cnn.csv")
          else open(os.devnull)) as f:
        log = f.read()
    if a.json:
        write_result(a.json, {"median_step_s": med, "best_hand_picked": best, "ratio": ratio, "tuned": r0["tuned"],
                              "tune_steps": r0["tune_steps"], "autotune_log_csv": log})


if __name__ == "__main__":
    main()
