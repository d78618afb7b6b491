"""Live gradient noise scale during data-parallel training, and what measuring it costs.

    python benchmarks/noise_scale.py trajectory --np 2,4 --epochs 2      # B_simple over training -> PNG
    python benchmarks/noise_scale.py overhead --np 2 --steps 60           # measure_noise_scale on vs off

Both launch `python -m pyhorovod.run -np N` on this file's worker. The worker trains a CNN on Fashion-MNIST
(the examples/fashion_mnist.py model when that file defines `Net`, else the small CNN below) with the
example's recipe (batch 64 per rank, momentum 0.9, LR 0.05 per 64 examples scaled linearly with one epoch
of warmup), data sharded by rank, DistributedOptimizer(measure_noise_scale=True, batch_size=local batch),
and records optimizer.noise_scale_report() every --record-every steps (rank 0 writes JSON).

Overhead: one process per rank holds two identical models, one wrapped with measure_noise_scale=False and
one with True, and alternates their steps on the same batches (A B A B ...), so the bimodal machine
(shared/anchors.md) slows both alike; the result is the ratio of median step times (forward, backward,
allreduce, update) with the 95% bootstrap interval of that ratio.
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


def small_cnn():
    import torch.nn as nn
    return nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def make_model():
    """The example's model if examples/fashion_mnist.py defines Net, else small_cnn (reported in JSON)."""
    path = os.path.join(ROOT, "examples", "fashion_mnist.py")
    if os.path.exists(path):
        import importlib.util
        spec = importlib.util.spec_from_file_location("fashion_mnist_example", path)
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
            if hasattr(mod, "Net"):
                return mod.Net(), "examples/fashion_mnist.py:Net"
        except Exception as exc:  # the example is someone else's file: fall back, but say so
            print(f"[noise_scale] could not import the example's Net ({exc!r}); using small_cnn", flush=True)
    return small_cnn(), "benchmarks/noise_scale.py:small_cnn"


def shard(hvd):
    import numpy as np
    import torch
    from pyhorovod.scaling.fmnist import load_fashion_mnist
    x, y = load_fashion_mnist("train")
    x = (x.astype(np.float32) / 255.0 - 0.2860) / 0.3530   # Fashion-MNIST mean / std
    x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


def batches(x, y, b, seed):
    import torch
    gen = torch.Generator().manual_seed(seed)
    epoch = 0
    while True:
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x) - b + 1, b):
            yield epoch, x[perm[i:i + b]], y[perm[i:i + b]]
        epoch += 1


def worker_trajectory(a):
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, model_name = make_model()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = shard(hvd)
    steps_per_epoch = len(x) // a.batch
    # As examples/fashion_mnist.py: --lr tuned for batch 64, linear scaling with one epoch of warmup.
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9),
                                   named_parameters=model.named_parameters(), batch_size=a.batch,
                                   measure_noise_scale=True, lr_scaling="linear", base_batch_size=64,
                                   warmup_epochs=1.0, steps_per_epoch=steps_per_epoch)
    lr = a.lr * a.batch * hvd.size() / 64
    rows, t0 = [], time.perf_counter()
    for step, (epoch, xb, yb) in enumerate(batches(x, y, a.batch, 1 + hvd.rank())):
        if step >= a.epochs * steps_per_epoch:
            break
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        if (step + 1) % a.record_every == 0:
            rep = opt.noise_scale_report()
            rows.append({"step": step + 1, "epoch": (step + 1) / steps_per_epoch, "loss": float(loss),
                         **{k: rep[k] for k in ("b_simple", "grad_sq", "trace_sigma", "temperature", "lr")}})
    final = opt.noise_scale_report()
    if hvd.rank() == 0:
        with open(a.json, "w") as f:
            json.dump({"np": hvd.size(), "local_batch": a.batch, "lr": lr, "model": model_name,
                       "seconds": time.perf_counter() - t0, "rows": rows, "final": final,
                       "summary": opt.noise_scale_estimator.summary()}, f, indent=1)


def _instrument_tap():
    """Training-thread CPU seconds spent in each NoiseScaleTap method (summed over the run)."""
    from pyhorovod.torch import noise_tap
    totals = {}
    for name in ("engine_slots", "accumulate", "start", "finish"):
        fn = getattr(noise_tap.NoiseScaleTap, name)

        def timed(self, *args, _fn=fn, _name=name, **kw):
            c = time.thread_time()
            try:
                return _fn(self, *args, **kw)
            finally:
                totals[_name] = totals.get(_name, 0.0) + time.thread_time() - c
        setattr(noise_tap.NoiseScaleTap, name, timed)
    return totals


def worker_overhead(a):
    import numpy as np
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    torch.set_num_threads(1)
    pair = []
    for measure in (False, True):
        torch.manual_seed(0)
        model, model_name = make_model()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size()),
                                       named_parameters=model.named_parameters(), batch_size=a.batch,
                                       measure_noise_scale=measure)
        pair.append((model, opt))
    x, y = shard(hvd)
    times = {False: [], True: []}
    cpu = {False: [], True: []}
    it = batches(x, y, a.batch, 1 + hvd.rank())
    tap_cpu, profiled = {}, max(1, a.steps // 5)
    for step in range(a.warmup + a.steps + profiled):
        if step == a.warmup + a.steps:
            # The breakdown of the tap's cost comes from extra steps after the timed ones: the wrappers
            # that measure it cost a few us per call, which would inflate the timed comparison.
            tap_cpu = _instrument_tap()
        _, xb, yb = next(it)
        order = (False, True) if step % 2 == 0 else (True, False)   # rotate who goes first
        for measure in order:
            model, opt = pair[measure]
            t, c = time.perf_counter(), time.thread_time()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            if a.warmup <= step < a.warmup + a.steps:
                times[measure].append(time.perf_counter() - t)
                cpu[measure].append(time.thread_time() - c)
    off, on = np.array(times[False]), np.array(times[True])
    rng = np.random.default_rng(0)
    boots = [np.median(rng.choice(on, len(on))) / np.median(rng.choice(off, len(off))) for _ in range(2000)]
    # Paired: step i of both models ran back to back, so they saw the same fast/slow machine state;
    # the median of the per-step ratios removes most of that state's variance from the comparison.
    paired = on / off
    paired_boots = [np.median(rng.choice(paired, len(paired))) for _ in range(2000)]
    # The training thread's CPU time: what the measurement costs in work, unaffected by waiting on other
    # processes (the wall-clock ratio above also includes the extra allreduce's latency).
    cpu_ratio = float(np.median(cpu[True]) / np.median(cpu[False]))
    if hvd.rank() == 0:
        with open(a.json, "w") as f:
            json.dump({"np": hvd.size(), "local_batch": a.batch, "model": model_name, "steps": a.steps,
                       "median_off_s": float(np.median(off)), "median_on_s": float(np.median(on)),
                       "ratio": float(np.median(on) / np.median(off)),
                       "ratio_ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))],
                       "paired_ratio": float(np.median(paired)),
                       "paired_ratio_ci95": [float(np.percentile(paired_boots, 2.5)),
                                             float(np.percentile(paired_boots, 97.5))],
                       "median_cpu_off_s": float(np.median(cpu[False])),
                       "median_cpu_on_s": float(np.median(cpu[True])), "cpu_ratio": cpu_ratio,
                       "tap_cpu_s_per_step": {k: v / profiled for k, v in tap_cpu.items()}},
                      f, indent=1)


def launch(np_, args, timeout):
    cmd = [sys.executable, "-m", "pyhorovod.run", "-np", str(np_), sys.executable, os.path.abspath(__file__)]
    t = time.perf_counter()
    proc = subprocess.run(cmd + args, cwd=ROOT, timeout=timeout, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd + args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr, time.perf_counter() - t   # rank 0's log lines are on stderr


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("mode", choices=("trajectory", "overhead", "worker-trajectory", "worker-overhead"))
    p.add_argument("--np", default="2,4")
    p.add_argument("--batch", type=int, default=64, help="local batch per rank")
    p.add_argument("--lr", type=float, default=0.05, help="LR for batch 64 (scaled linearly, 1 epoch warmup)")
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--record-every", type=int, default=10)
    p.add_argument("--steps", type=int, default=200, help="overhead: timed steps per model")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "noise_scale"))
    p.add_argument("--timeout", type=float, default=1800)
    a = p.parse_args(argv)
    if a.mode == "worker-trajectory":
        return worker_trajectory(a)
    if a.mode == "worker-overhead":
        return worker_overhead(a)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    results = {}
    for n in (int(v) for v in a.np.split(",")):
        path = f"{a.out}_{a.mode}_np{n}.json"
        extra = (["--epochs", str(a.epochs), "--record-every", str(a.record_every), "--lr", str(a.lr)]
                 if a.mode == "trajectory" else ["--steps", str(a.steps), "--warmup", str(a.warmup)])
        worker = [f"worker-{a.mode}", "--batch", str(a.batch), "--json", path] + extra
        out, secs = launch(n, worker, a.timeout)
        with open(path) as f:
            results[n] = json.load(f)
        lines = [ln for ln in out.splitlines() if "[noise-scale]" in ln]
        if lines:
            results[n]["rank0_lines"] = lines[-3:]
        C.write_result(path, results[n])
        r = results[n]
        if a.mode == "trajectory":
            print(f"np={n}: {r['summary']}  ({secs:.0f}s)", flush=True)
        else:
            print(f"np={n}: step {r['median_off_s'] * 1e3:.1f} ms off, {r['median_on_s'] * 1e3:.1f} ms on: "
                  f"ratio {r['ratio']:.4f} (95% CI {r['ratio_ci95'][0]:.4f}-{r['ratio_ci95'][1]:.4f}), "
                  f"paired {r['paired_ratio']:.4f} ({r['paired_ratio_ci95'][0]:.4f}-"
                  f"{r['paired_ratio_ci95'][1]:.4f}); "
                  "training "
                  f"thread CPU {r['median_cpu_off_s'] * 1e3:.1f} vs {r['median_cpu_on_s'] * 1e3:.1f} ms: "
                  f"ratio {r['cpu_ratio']:.4f}; in the tap: " + ", ".join(
                      f"{k} {v * 1e3:.3f} ms" for k, v in r["tap_cpu_s_per_step"].items()), flush=True)
    if a.mode == "trajectory":
        from pyhorovod.scaling.sweep_plot import plot_b_simple_runs
        runs = {f"{n} ranks x {r['local_batch']} (B_big={n * r['local_batch']}, lr {r['lr']:g})":
                [(row["epoch"], row["b_simple"]) for row in r["rows"]] for n, r in results.items()}
        plot_b_simple_runs(runs, a.out + "_trajectory.png", xlabel="epoch",
                           title="Fashion-MNIST CNN: live B_simple (ratio of EMAs) during training")
        print(f"wrote {a.out}_trajectory.png", flush=True)


if __name__ == "__main__":
    main()
