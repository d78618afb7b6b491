"""What running under Ray costs: start-up to the first allreduce, and the training step time of the 4.2M MLP
(shared/anchors.md), RayExecutor against `pyhorovod run`, on this machine.

    flock /tmp/bench.lock python3 benchmarks/ray_overhead.py --np 2 --startup-rounds 4 --blocks 16

Candidates, each a job of --np ranks training the MLP (batch --batch per rank, SGD, one thread per rank,
DistributedOptimizer):
  run   `python -m pyhorovod.run -np N python ray_overhead.py --worker`, started by this script;
  ray   RayExecutor(num_workers=N) on a one-node Ray that this script starts once (ray.init) before
        anything is timed: Ray's own start is reported apart.
Start-up (--startup-rounds fresh jobs of each, alternating): wall time from the launch (Popen, or
executor.start()) to rank 0's return from its first allreduce, torch's import and init() included in both.
Step time: ONE job of each runs at the same time and they take turns (a shared turn file): block b of
--block-steps steps runs in `run`, then in `ray`, then block b+1 ...; the job not on turn sleeps
(polling the file every 2 ms, no collective pending). A change of the machine's state then hits both
alike (shared/anchors.md: this machine is bimodal and shared). Ray starts its workers at nice 15
(RAY_worker_niceness), `pyhorovod run` at the caller's 0: on a shared machine that alone slows the Ray
ranks; --ray-worker-niceness 0 takes it out of the comparison. Per block: per step the slowest rank's
time, median over the block's steps; reported: the median over blocks of each, and the median of the
per-block ratios ray / run.
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

    def step(i):
        x, y = data[i % len(data)]
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        return time.perf_counter() - t0

    if not args.turn_file:   # start-up only
        return {"rank": hvd.rank(), "first_allreduce": first, "blocks": []}
    for i in range(args.warmup):
        step(i)
    blocks = []
    for b in range(args.blocks):
        wait_turn(args.turn_file, 2 * b + args.job)
        hvd.allreduce(torch.zeros(1), name="bench.go")      # untimed: both ranks start the block together
        blocks.append([step(i) for i in range(args.block_steps)])
        hvd.allreduce(torch.zeros(1), name="bench.done")
        if hvd.rank() == 0:
            pass_turn(args.turn_file, 2 * b + args.job + 1)
    return {"rank": hvd.rank(), "first_allreduce": first, "blocks": blocks}


def wait_turn(path, turn, limit_s=600):
    deadline = time.monotonic() + limit_s
    while True:
        try:
            with open(path) as f:
                if int(f.read() or -1) == turn:
                    return
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"turn {turn} did not come within {limit_s} s ({path})")
        time.sleep(0.002)


def pass_turn(path, turn):
    with open(path + ".tmp", "w") as f:
        f.write(str(turn))
    os.replace(path + ".tmp", path)   # the other job never reads a half-written number


def block_times(records):
    """Per block: per step the slowest rank's time, median over the block's steps."""
    per_rank = [r["blocks"] for r in records]
    return [statistics.median(max(ts) for ts in zip(*blocks)) for blocks in zip(*per_rank)]


def worker_argv(args, job, turn_file):
    return [os.path.abspath(__file__), "--worker", "--input", str(args.input), "--hidden", str(args.hidden),
            "--layers", str(args.layers), "--classes", str(args.classes), "--batch", str(args.batch),
            "--blocks", str(args.blocks), "--block-steps", str(args.block_steps), "--warmup", str(args.warmup),
            "--job", str(job), "--turn-file", turn_file]


def start_run(args, turn_file=""):
    cmd = [sys.executable, "-m", "pyhorovod.run", "-np", str(args.np), sys.executable] + worker_argv(args, 0, turn_file)
    return time.time(), subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         env=C.python_env())


def finish_run(started, args):
    t0, proc = started
    out, err = proc.communicate(timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"pyhorovod run failed ({proc.returncode}):\n{out[-2000:]}{err[-2000:]}")
    recs = C.parse_records(out)
    return min(r["first_allreduce"] for r in recs if r["rank"] == 0) - t0, recs


def start_ray(args, turn_file=""):
    import argparse
    from pyhorovod.ray import RayExecutor
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=args.np)
    t0 = time.time()
    ex.start()
    wargs = argparse.Namespace(**dict(vars(args), job=1, turn_file=turn_file))
    return t0, ex, ex.run_remote(measure, args=[wargs])


def finish_ray(started):
    import ray
    t0, ex, refs = started
    try:
        recs = ray.get(refs)
    finally:
        ex.shutdown()
    return recs[0]["first_allreduce"] - t0, recs


def main(argv=None):
    p = C.arg_parser(__doc__)
    add_mlp_args(p)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--startup-rounds", type=int, default=4, help="fresh jobs of each candidate, for start-up")
    p.add_argument("--blocks", type=int, default=16, help="turns of each candidate in the step-time phase")
    p.add_argument("--block-steps", type=int, default=10, help="timed steps per turn")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--timeout", type=float, default=600, help="seconds per job")
    p.add_argument("--ray-worker-niceness", type=int, default=None,
                   help="RAY_worker_niceness for the Ray this script starts (Ray's default: 15; `run` ranks: 0)")
    p.add_argument("--worker", action="store_true", help=argparse_hidden())
    p.add_argument("--job", type=int, default=0, help=argparse_hidden())
    p.add_argument("--turn-file", default="", help=argparse_hidden())
    args = p.parse_args(argv)
    args.model = "mlp"
    if args.worker:
        C.emit(measure(args))
        return 0
    import tempfile
    import ray
    if args.ray_worker_niceness is not None:
        os.environ["RAY_worker_niceness"] = str(args.ray_worker_niceness)   # read by the raylet at start
    t0 = time.time()
    ray.init(address="local", num_cpus=2 * args.np, include_dashboard=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), HERE])}})
    print(f"ray.init (a one-node Ray): {time.time() - t0:.1f} s", flush=True)
    startup = {"run": [], "ray": []}
    for r in range(args.startup_rounds):
        for cand in (["run", "ray"] if r % 2 == 0 else ["ray", "run"]):
            took = finish_run(start_run(args), args)[0] if cand == "run" else finish_ray(start_ray(args))[0]
            startup[cand].append(took)
            print(f"start-up round {r + 1} {cand:>3}: {took:.2f} s", flush=True)
    with tempfile.TemporaryDirectory() as d:
        turn = os.path.join(d, "turn")
        pass_turn(turn, 0)
        run_job, ray_job = start_run(args, turn), start_ray(args, turn)
        run_blocks, ray_blocks = block_times(finish_run(run_job, args)[1]), block_times(finish_ray(ray_job)[1])
    ray.shutdown()
    ratios = [b / a for a, b in zip(run_blocks, ray_blocks)]
    C.print_table(["candidate", "start-up s (median)", "step ms (median over blocks)"],
                  [[c, f"{statistics.median(startup[c]):.2f}", f"{1e3 * statistics.median(blocks):.2f}"]
                   for c, blocks in (("run", run_blocks), ("ray", ray_blocks))])
    print(f"step time ray / run: median of per-block ratios {statistics.median(ratios):.3f} "
          f"(quartiles {statistics.quantiles(ratios, n=4)[0]:.3f}..{statistics.quantiles(ratios, n=4)[2]:.3f}, "
          f"{len(ratios)} blocks of {args.block_steps} steps); start-up rounds: run "
          f"{', '.join(f'{x:.2f}' for x in startup['run'])}; ray {', '.join(f'{x:.2f}' for x in startup['ray'])}; "
          f"np {args.np}, batch {args.batch}/rank; Ray worker niceness "
          f"{'default' if args.ray_worker_niceness is None else args.ray_worker_niceness}")
    return 0


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
