"""What running under Ray costs: start-up to the first allreduce, and the training step time of the 4.2M MLP
(shared/anchors.md), RayExecutor against `pyhorovod run`, interleaved round by round on this machine.

    flock /tmp/bench.lock python3 benchmarks/ray_overhead.py --np 2 --rounds 5

Each round runs both candidates (order alternating), each a fresh job of --np ranks that trains the MLP
(batch --batch per rank, SGD, one thread per rank; DistributedOptimizer):
  run   `python -m pyhorovod.run -np N python ray_overhead.py --worker`, started by this script;
  ray   RayExecutor(num_workers=N) on a one-node Ray that this script starts once (ray.init), before the
        rounds: Ray's own start is reported apart, not in the start-up figure.
Start-up: wall time from the launch (Popen, or executor.start()) to rank 0's return from its first
allreduce, torch's import and init() included in both. Step time: per step the slowest rank's time,
median over the timed steps; per candidate the median over rounds; the ratio is ray / run.
"""
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]   # common.py, synthetic.py; pyhorovod from this tree
import common as C  # noqa: E402
from synthetic import add_mlp_args, build_model  # noqa: E402


def measure(args):
    """One rank: init, one allreduce (its wall time is the end of start-up), warm-up, timed steps."""
    import torch
    import torch.nn.functional as F
    import pyhorovod.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    hvd.allreduce(torch.zeros(1), name="bench.first")
    first = time.time()
    torch.manual_seed(1234)
    model = build_model(args)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    gen = torch.Generator().manual_seed(hvd.rank())
    data = [(torch.randn(args.batch, args.input, generator=gen),
             torch.randint(0, args.classes, (args.batch,), generator=gen)) for _ in range(4)]
    times = []
    for i in range(args.warmup + args.steps):
        x, y = data[i % len(data)]
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    return {"rank": hvd.rank(), "first_allreduce": first, "step_times": times}


def step_time(records):
    per_step = zip(*(r["step_times"] for r in records))
    return statistics.median(max(ts) for ts in per_step)


def worker_argv(args):
    return [os.path.abspath(__file__), "--worker", "--input", str(args.input), "--hidden", str(args.hidden),
            "--layers", str(args.layers), "--classes", str(args.classes), "--batch", str(args.batch),
            "--steps", str(args.steps), "--warmup", str(args.warmup)]


def run_candidate(args):
    cmd = [sys.executable, "-m", "pyhorovod.run", "-np", str(args.np), sys.executable] + worker_argv(args)
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=C.python_env())
    if done.returncode != 0:
        raise RuntimeError(f"pyhorovod run failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    recs = C.parse_records(done.stdout)
    return min(r["first_allreduce"] for r in recs if r["rank"] == 0) - t0, step_time(recs)


def ray_candidate(args):
    from pyhorovod.ray import RayExecutor
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=args.np)
    t0 = time.time()
    ex.start()
    try:
        recs = ex.run(measure, args=[args])
    finally:
        ex.shutdown()
    return recs[0]["first_allreduce"] - t0, step_time(recs)


def main(argv=None):
    p = C.arg_parser(__doc__)
    add_mlp_args(p)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=60, help="timed steps per job")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--timeout", type=float, default=300, help="seconds per job")
    p.add_argument("--worker", action="store_true", help=argparse_hidden())
    args = p.parse_args(argv)
    args.model = "mlp"
    if args.worker:
        C.emit(measure(args))
        return 0
    import ray
    t0 = time.time()
    ray.init(num_cpus=args.np, include_dashboard=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), HERE])}})
    print(f"ray.init (a one-node Ray): {time.time() - t0:.1f} s", flush=True)
    results = {"run": [], "ray": []}
    for r in range(args.rounds):
        order = ["run", "ray"] if r % 2 == 0 else ["ray", "run"]
        for cand in order:
            startup, step = (run_candidate if cand == "run" else ray_candidate)(args)
            results[cand].append((startup, step))
            print(f"round {r + 1} {cand:>3}: start-up {startup:.2f} s, step {1e3 * step:.2f} ms", flush=True)
    ray.shutdown()
    rows = []
    for cand in ("run", "ray"):
        rows.append([cand, f"{statistics.median(s for s, _ in results[cand]):.2f}",
                     f"{1e3 * statistics.median(t for _, t in results[cand]):.2f}"])
    C.print_table(["candidate", "start-up s (median)", "step ms (median)"], rows)
    ratios = [b[1] / a[1] for a, b in zip(results["run"], results["ray"])]
    print(f"step time ray / run: median of per-round ratios {statistics.median(ratios):.3f} "
          f"(rounds: {', '.join(f'{x:.3f}' for x in ratios)}); np {args.np}, batch {args.batch}/rank")
    return 0


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
