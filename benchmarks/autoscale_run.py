"""Autoscaled against fixed-size training on Fashion-MNIST: time and worker-seconds to a test accuracy.

    flock /tmp/bench.lock python3 benchmarks/autoscale_run.py --rounds 2 --counts 1,2,3

Each round runs, in turn, the autoscaled job (`pyhorovod run -np 1 --min-np 1 --max-np 3` with the
autoscaler's environment, as `--autoscale goodput` sets it) and one fixed-size job per count, the same
worker script in all of them: an MLP 784-256-10, 32 images per backward pass and 2 passes per step (so
the noise scale is measurable at one worker too), SGD momentum 0.9, LR 0.05 per 64 images scaled
linearly with the global batch (scaling/lr.py ResizeWarmup: after a grow the LR goes to the new value
over 50 steps). Rank 0 evaluates the test accuracy every 100 steps; the run ends at the first evaluation
at or above --target. Time is rank 0's, from its first init() to that evaluation; worker-seconds are
count x time for the fixed runs and the trace's integral for the autoscaled one. With --budget-steps N
the job has a step budget, and rank 0 tells the autoscaler the time left, (N - step) x its step time,
which turns the resize-cost rule on (pyhorovod/scaling/autoscale.py).

Elastic resets without the elastic State API: every 10 steps rank 0 reads `_membership.hosts_changed()`
(the driver announces the workers it starts or lets go) and broadcasts it with the "done" flag; on a
change every worker saves the model and optimizer state, does shutdown(); init() (a worker the driver
lets go leaves there with WorkerStopped), builds a fresh model and DistributedOptimizer for the new
size and takes rank 0's state by broadcast.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import common as C  # noqa: E402

LOCAL, PASSES, BASE_LR = 32, 2, 0.05


def worker(a):
    import numpy as np
    import torch
    import pyhorovod.torch as hvd
    from pyhorovod.elastic import _membership
    from pyhorovod.elastic.autoscaler import Autoscaler
    from pyhorovod.scaling.fmnist import load_fashion_mnist
    from pyhorovod.scaling.lr import ResizeWarmup, scale_factor

    torch.set_num_threads(1)
    t0 = time.monotonic()
    xs, ys = load_fashion_mnist("train")
    xt, yt = load_fashion_mnist("test")
    norm = lambda v: torch.from_numpy((v.reshape(len(v), -1).astype(np.float32) / 255.0 - 0.2860) / 0.3530)  # noqa
    x, y, x_test, y_test = norm(xs), torch.from_numpy(ys), norm(xt), torch.from_numpy(yt)
    autoscale = os.environ.get("PYHOROVOD_AUTOSCALE") == "goodput"
    state = {"model": None, "opt": None, "step": 0}
    scaler, warm, prev_batch, result = None, ResizeWarmup(50, log_fn=print), None, None
    hvd.init()
    while True:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        base = torch.optim.SGD(model.parameters(), lr=BASE_LR, momentum=0.9)
        if state["model"] is not None:
            model.load_state_dict(state["model"])
            base.load_state_dict(state["opt"])
        opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters(), batch_size=LOCAL,
                                       backward_passes_per_step=PASSES, measure_noise_scale=True)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        step = hvd.broadcast_object(state["step"], 0, name="step")
        n, rank = hvd.size(), hvd.rank()
        if autoscale:
            if scaler is None:
                scaler = Autoscaler(opt, started_at=t0)
            else:
                scaler.rebind(opt)
        global_batch = LOCAL * PASSES * n
        if rank == 0 and prev_batch is not None and prev_batch != global_batch:
            warm.resize(step, prev_batch, global_batch)
        warm = hvd.broadcast_object(warm, 0, name="warmup")   # a new worker takes rank 0's LR ramp
        prev_batch = global_batch
        target = scale_factor("linear", 64, global_batch)
        gen = torch.Generator().manual_seed(1000 * n + rank + step)
        changed = done = False
        last_t, step_s = time.monotonic(), None
        while not (changed or done):
            for group in opt.param_groups:
                group["lr"] = BASE_LR * warm.multiplier(step, target)
            opt.zero_grad()
            for _ in range(PASSES):
                idx = torch.randint(len(x), (LOCAL,), generator=gen)
                (torch.nn.functional.cross_entropy(model(x[idx]), y[idx]) / PASSES).backward()
            opt.step()
            step += 1
            now = time.monotonic()
            step_s = now - last_t if step_s is None else 0.9 * step_s + 0.1 * (now - last_t)
            last_t = now
            if scaler is not None:
                # The resize-cost rule's input, when the job has a step budget: its steps left at this
                # step time (the budget counts steps at the starting count; a grow needs fewer).
                left = None if not a.budget_steps else max(0, a.budget_steps - step) * step_s
                scaler.step(remaining_s=left)
            if step % 10 == 0:
                flags = None
                if rank == 0:
                    if step % 100 == 0:
                        with torch.no_grad():
                            acc = float((model(x_test).argmax(1) == y_test).float().mean())
                        if acc >= a.target or step >= a.max_steps:
                            result = {"time_s": time.monotonic() - t0, "step": step, "accuracy": acc,
                                      "final_np": n, "reached": acc >= a.target}
                    flags = (_membership.hosts_changed() is not None, result is not None)
                changed, done = hvd.broadcast_object(flags, 0, name="flags")
        if done:
            break
        state = {"model": model.state_dict(), "opt": base.state_dict(), "step": step}
        hvd.shutdown()
        hvd.init()   # WorkerStopped (exit 0) here for a worker the driver lets go
    if hvd.rank() == 0:
        if scaler is not None:
            result["worker_seconds"] = scaler.finish(f"test accuracy {a.target}")
            result["counts"] = [(d.step, d.current_np, d.target_np) for d in scaler.decisions]
            result["b_simple_end"] = scaler.estimator.b_simple()
            counts = range(1, scaler.max_np + 1)
            result["model"] = scaler.model.table(counts)
            # the same job on a host with a core per rank: what the model predicts without oversubscription
            from pyhorovod.scaling.throughput import Host
            spare = scaler.model.what_if([Host("spare", scaler.max_np, scaler.max_np)])
            result["model_spare_cores"] = spare.table(counts)
        else:
            result["worker_seconds"] = hvd.size() * result["time_s"]
        result["resizes"] = warm.resizes
        with open(a.json, "w") as f:
            json.dump(result, f)


def launch(kind, a, path):
    env = dict(os.environ)
    if kind == "auto":
        cmd = ["-np", "1", "--min-np", "1", "--max-np", str(a.max_np)]
        env.update({"PYHOROVOD_AUTOSCALE": "goodput", "PYHOROVOD_AUTOSCALE_MIN_NP": "1",
                    "PYHOROVOD_AUTOSCALE_MAX_NP": str(a.max_np), "PYHOROVOD_AUTOSCALE_EVERY": str(a.every),
                    "PYHOROVOD_AUTOSCALE_HOSTS": f"localhost:{a.max_np}:{os.cpu_count()}",
                    "PYHOROVOD_AUTOSCALE_TRACE": path[:-5] + "_trace",
                    "PYHOROVOD_NOISE_SCALE_HORIZON": "25600", "PYHOROVOD_NOISE_SCALE_LOG_EVERY": "0"})
    else:
        cmd = ["-np", str(kind)]
        env.update({"PYHOROVOD_NOISE_SCALE_HORIZON": "25600", "PYHOROVOD_NOISE_SCALE_LOG_EVERY": "0"})
    full = [sys.executable, "-m", "pyhorovod.run"] + cmd + [sys.executable, os.path.abspath(__file__), "--worker",
                                                            "--json", path, "--target", str(a.target),
                                                            "--max-steps", str(a.max_steps),
                                                            "--budget-steps", str(a.budget_steps)]
    t = time.monotonic()
    proc = subprocess.run(full, cwd=ROOT, env=env, timeout=a.timeout, capture_output=True, text=True)
    wall = time.monotonic() - t
    if proc.returncode:
        raise RuntimeError(f"{' '.join(full)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    with open(path) as f:
        res = json.load(f)
    res["launch_wall_s"] = wall
    res["driver_lines"] = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "asks for" in ln
                           or "shrinks" in ln or "resize" in ln][:20]
    return res


def summarise(results):
    """Median time and worker-seconds per configuration, and the autoscaled run against the best fixed
    count by each measure (ratios of medians over the rounds)."""
    import statistics as st
    med = {k: (st.median(r["time_s"] for r in v), st.median(r["worker_seconds"] for r in v),
               sum(bool(r.get("reached")) for r in v)) for k, v in results.items() if v}
    fixed = {k: m for k, m in med.items() if k != "auto"}
    rows = [[k, len(results[k]), hit, f"{t:.1f}", f"{w:.1f}"] for k, (t, w, hit) in med.items()]
    C.print_table(["config", "runs", "reached target", "median s to target", "median worker-s"], rows)
    if "auto" in med and fixed:
        best_t = min(fixed, key=lambda k: fixed[k][0])
        best_w = min(fixed, key=lambda k: fixed[k][1])
        print(f"autoscaled / best fixed time ({best_t} workers): {med['auto'][0] / fixed[best_t][0]:.3f}; "
              f"autoscaled / best fixed worker-seconds ({best_w} workers): {med['auto'][1] / fixed[best_w][1]:.3f}")


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--worker", action="store_true")
    p.add_argument("--json")
    p.add_argument("--target", type=float, default=0.86)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=8000, help="end there even below the target (reported)")
    p.add_argument("--counts", default="1,2,3")
    p.add_argument("--max-np", type=int, default=3)
    p.add_argument("--every", type=int, default=30)
    p.add_argument("--budget-steps", type=int, default=0,
                   help="the job's step budget, which turns the resize-cost rule on: rank 0 passes the "
                        "autoscaler (budget - step) x its step time as the time left (0: unknown, rule off)")
    p.add_argument("--only-auto", action="store_true")
    p.add_argument("--summarise", action="store_true", help="print the table of an earlier run's JSON")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "autoscale"))
    p.add_argument("--timeout", type=float, default=900)
    a = p.parse_args(argv)
    if a.worker:
        return worker(a)
    if a.summarise:
        with open(a.out + ".json") as f:
            return summarise(json.load(f)["results"])
    kinds = ["auto"] + ([] if a.only_auto else [int(c) for c in a.counts.split(",")])
    results = {str(k): [] for k in kinds}
    for r in range(a.rounds):
        for k in (kinds if r % 2 == 0 else kinds[::-1]):    # interleaved, order reversed every round
            res = launch(k, a, f"{a.out}_{k}_r{r}.json")
            results[str(k)].append(res)
            print(f"round {r} {k}: {res['time_s']:.1f} s to {res['accuracy']:.3f} at step {res['step']}, "
                  f"{res['worker_seconds']:.1f} worker-s, launch {res['launch_wall_s']:.1f} s"
                  + (f", decisions {[c for c in res['counts'] if c[2]]}" if k == "auto" else ""), flush=True)
            C.write_result(a.out + ".json", {"target": a.target, "results": results})   # after every run
    summarise(results)


if __name__ == "__main__":
    main()
