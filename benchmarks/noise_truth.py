"""Live B_simple against its exact value, during real data-parallel training (softmax regression).

    python benchmarks/noise_truth.py --np 2,4 --epochs 2       # runs, then the table of RESULTS.md

Ground truth. For softmax regression on Fashion-MNIST (logits z = W x + c, 784 pixels) one example's
gradient is (p - y) x^T for W and (p - y) for c, so over the 60,000 training images taken as the
population G = mean_i g_i and tr(Sigma) = mean_i |g_i|^2 - |G|^2 exactly, with |g_i|^2 =
(|x_i|^2 + 1) |p_i - y_i|^2; B_true = tr(Sigma) / |G|^2 at the weights of that step.

The worker trains with `python -m pyhorovod.run -np N`: batch --batch per rank, data sharded by rank,
SGD momentum 0.9, LR --lr per 64 images scaled linearly (one epoch of warmup), through
DistributedOptimizer(measure_noise_scale=True, batch_size=...). Rank 0 computes the exact values before
every --truth-every-th step and records, for every step, the per-step unbiased estimates the optimizer's
estimator received (|G|^2, tr Sigma) and the live B_simple it reports. Because the estimator does not
steer training, any other smoothing can then be replayed offline on the very same per-step estimates
(`analyse`): that is how the horizons in RESULTS.md are compared.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import common as C  # noqa: E402
from pyhorovod.scaling.noise_scale import horizon_beta  # noqa: E402


def exact_stats(w, c, x, x_sq, y):
    """(|G|^2, tr Sigma) over all of x (torch tensors; x_sq = |x_i|^2 + 1)."""
    import torch
    r = torch.softmax(x @ w.T + c, dim=1)
    r[torch.arange(len(y)), y] -= 1.0
    gw, gc = r.T @ x / len(y), r.mean(0)
    g_sq = float((gw.double() ** 2).sum() + (gc.double() ** 2).sum())
    mean_sq = float((x_sq.double() * (r.double() ** 2).sum(1)).mean())
    return g_sq, mean_sq - g_sq


def worker(a):
    import torch
    import pyhorovod.torch as hvd
    from pyhorovod.scaling.fmnist import load_fashion_mnist
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    xs, ys = load_fashion_mnist("train")
    x_all = torch.from_numpy((xs.reshape(len(xs), -1).astype(np.float32) / 255.0 - 0.2860) / 0.3530)
    y_all = torch.from_numpy(ys)
    x, y = x_all[hvd.rank()::hvd.size()], y_all[hvd.rank()::hvd.size()]
    model = torch.nn.Linear(784, 10)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    steps_per_epoch = len(x) // a.batch
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9),
                                   named_parameters=model.named_parameters(), batch_size=a.batch,
                                   measure_noise_scale=True, lr_scaling="linear", base_batch_size=64,
                                   warmup_epochs=1.0, steps_per_epoch=steps_per_epoch)
    est = opt.noise_scale_estimator
    per_step = []
    update = est.update

    def recording_update(*args, **kw):   # the per-step estimates, as the estimator received them
        out = update(*args, **kw)
        if out is not None:
            per_step.append((out[0][0], out[1][0]))
        return out
    est.update = recording_update
    x_sq = (x_all ** 2).sum(1) + 1.0
    rows, gen, t0 = [], torch.Generator().manual_seed(1 + hvd.rank()), time.perf_counter()
    total = int(a.epochs * steps_per_epoch)
    step = 0
    while step < total:
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x) - a.batch + 1, a.batch):
            if step >= total:
                break
            truth = None
            if hvd.rank() == 0 and step % a.truth_every == 0:
                with torch.no_grad():
                    truth = exact_stats(model.weight, model.bias, x_all, x_sq, y_all)
            idx = perm[i:i + a.batch]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            if hvd.rank() == 0:
                g, tr = per_step[-1]
                rows.append({"step": step, "est_grad_sq": g, "est_trace": tr, "live": est.b_simple(),
                             "true_grad_sq": None if truth is None else truth[0],
                             "true_trace": None if truth is None else truth[1]})
            step += 1
    if hvd.rank() == 0:
        with torch.no_grad():
            acc = float((model(x_all).argmax(1) == y_all).float().mean())
        with open(a.json, "w") as f:
            json.dump({"np": hvd.size(), "local_batch": a.batch, "b_big": est.b_big, "ema_beta": est.ema_beta,
                       "lr": a.lr * a.batch * hvd.size() / 64, "steps_per_epoch": steps_per_epoch,
                       "train_accuracy": acc, "seconds": time.perf_counter() - t0, "rows": rows}, f)


def ema_ratio(num, den, beta):
    """Ratio of bias-corrected EMAs of two series, as the estimator computes it (the correction cancels
    in the ratio); NaN while the denominator's EMA is <= 0."""
    mn = md = 0.0
    out = []
    for a, b in zip(num, den):
        mn, md = beta * mn + (1 - beta) * a, beta * md + (1 - beta) * b
        out.append(mn / md if md > 0 and mn >= 0 else np.nan)
    return np.array(out)


def _stats(ratio):
    ratio = ratio[np.isfinite(ratio)]
    return {"median": float(np.median(ratio)), "mean": float(ratio.mean()), "std": float(ratio.std()),
            "worst": float(np.abs(ratio - 1).max())}


def against_truth(run, beta, skip_epochs):
    """live/true over the steps after `skip_epochs`, for three truths: the exact B of that step
    ("instant"); the same EMAs fed the exact |G|^2 and tr(Sigma) ("exact_ema": what the estimator
    estimates, so this isolates its error); exact values averaged over a window of the EMA's horizon
    centred on the step ("window": the noise scale of that stretch of training, without the EMA's lag)."""
    rows = run["rows"]
    if any(r["true_grad_sq"] is None for r in rows):
        raise ValueError("against_truth needs the exact values at every step (--truth-every 1)")
    g, tr = (np.array([r[k] for r in rows]) for k in ("est_grad_sq", "est_trace"))
    tg, ttr = (np.array([r[k] for r in rows]) for k in ("true_grad_sq", "true_trace"))
    live = ema_ratio(tr, g, beta)
    half = int(round(0.5 / (1 - beta)))
    window = np.array([ttr[max(0, i - half):i + half + 1].mean() / tg[max(0, i - half):i + half + 1].mean()
                       for i in range(len(rows))])
    k = int(skip_epochs * run["steps_per_epoch"])
    return {"instant": _stats((live / (ttr / tg))[k:]), "exact_ema": _stats((live / ema_ratio(ttr, tg, beta))[k:]),
            "window": _stats((live / window)[k:]), "truth_end": float(ttr[-1] / tg[-1]),
            "live_end": float(live[-1])}


def analyse(runs, horizons_examples, skip_epochs):
    """Per run: the estimator's own setting, fixed-step horizons and horizons in examples."""
    table = {}
    for n, run in runs.items():
        res = {"as run (beta %g)" % run["ema_beta"]: against_truth(run, run["ema_beta"], skip_epochs)}
        for beta in (0.99, 0.95):
            res[f"beta {beta} ({1 / (1 - beta):.0f} steps)"] = against_truth(run, beta, skip_epochs)
        for h in horizons_examples:
            beta = horizon_beta(h, run["b_big"])
            res[f"{h} examples (beta {beta:.4f})"] = against_truth(run, beta, skip_epochs)
        table[n] = res
    return table


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--np", default="2,4")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--truth-every", type=int, default=1)
    p.add_argument("--skip-epochs", type=float, default=0.25, help="steps before this are not scored")
    p.add_argument("--horizons", default="6400,12800,25600", help="EMA horizons in examples to replay")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--analyse-only", action="store_true", help="reuse the JSON files of an earlier run")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "noise_truth"))
    p.add_argument("--timeout", type=float, default=1800)
    a = p.parse_args(argv)
    if a.worker:
        return worker(a)
    runs = {}
    for n in (int(v) for v in a.np.split(",")):
        path = f"{a.out}_np{n}_b{a.batch}.json"
        if not a.analyse_only:
            cmd = [sys.executable, "-m", "pyhorovod.run", "-np", str(n), sys.executable,
                   os.path.abspath(__file__), "--worker", "--json", path, "--batch", str(a.batch),
                   "--lr", str(a.lr), "--epochs", str(a.epochs), "--truth-every", str(a.truth_every)]
            proc = subprocess.run(cmd, cwd=ROOT, timeout=a.timeout, capture_output=True, text=True)
            if proc.returncode:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        with open(path) as f:
            runs[n] = json.load(f)
    table = analyse(runs, [int(h) for h in a.horizons.split(",")], a.skip_epochs)
    for n, res in table.items():
        r = runs[n]
        print(f"np={n} x {r['local_batch']} (B_big {r['b_big']}), {len(r['rows'])} steps, train acc "
              f"{r['train_accuracy']:.3f}, {r['seconds']:.0f} s; live/true after {a.skip_epochs} epoch:")
        cells = lambda d: f"{d['median']:.3f} / {d['mean']:.3f} / {d['std']:.3f} / {d['worst']:.2f}"  # noqa: E731
        C.print_table(["smoothing", "vs exact EMA: med/mean/std/worst", "vs window", "vs instant",
                       "true B at end", "live at end"],
                      [[k, cells(v["exact_ema"]), cells(v["window"]), cells(v["instant"]),
                        f"{v['truth_end']:.0f}", f"{v['live_end']:.0f}"] for k, v in res.items()])
    C.write_json(f"{a.out}_b{a.batch}_summary.json", {str(n): v for n, v in table.items()})
    return table


if __name__ == "__main__":
    main()
