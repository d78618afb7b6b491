"""Steps-to-result sweep: how many steps each batch size needs to reach a target, tuned per batch size.

    python -m pyhorovod.scaling.sweep --jobs 2 --out sweep                 (Fashion-MNIST, minutes)
    python -m pyhorovod.scaling.sweep --train mypkg.mymod:trial ...          (a user's training function)

Protocol (Shallue et al. 2018): for every batch size B, a quasi-random (Halton) search over the learning
rate, momentum and a linear decay, each trial trained from scratch; steps-to-result for a target is the
first evaluation at or below the target, minimised over all trials. Then S(B) = S_min (1 + B_crit/B) is
fitted (stepfit.py) and the three regimes are marked on a log-log plot (sweep_plot.py), with the live
noise scale B_simple overlaid: measured on a rerun of the best trial at the batch size nearest the
fitted B_crit (where the regime changes; `--measure-batch` overrides), with the batch cut into
`--measure-workers` in-process workers, read when the rerun first meets each target.

Search space. Momentum enters through the effective learning rate lr_eff = lr / (1 - momentum), the
step size of heavy-ball SGD in the long run; lr_eff is searched log-uniformly over +-`lr_width` decades
around a centre that follows the square-root rule lr_center * sqrt(B / 128), and 1 - momentum over
[0.01, 0.3] log-uniformly, so plain SGD, heavy ball and Nesterov see the same effective step sizes.
A best trial on the edge of its range is flagged in the JSON (`best_at_edge`): widen the range then.
Decay: lr(t) = lr (1 - (1 - f) min(t, T)/T), T = d x max_steps, d in [0.5, 1], f in [0.01, 1] (log).

Exactness shortcut: trials run in order of their distance from the LR centre and each stops as soon as it
can no longer beat the best step count found so far for every target. This cannot change the result
(steps-to-result is a minimum over trials), only the time.

A trial is trial(batch_size, hparams, max_steps, report[, measure=False]); see trial.py.
"""
import argparse
import importlib
import inspect
import json
import math
import os
import sys
import time

import numpy as np

from .stepfit import fit_steps, halton

ONE_MINUS_MOMENTUM = (0.01, 0.3)


def sample_hparams(optimizer, batch_size, n, lr_center=1.0, lr_width=1.0, decay=True):
    """n quasi-random hyperparameter points for one batch size, most central learning rate first."""
    dims = 1 + (optimizer != "sgd") + 2 * bool(decay)
    pts = halton(n, dims)
    centre = lr_center * math.sqrt(batch_size / 128.0)
    out = []
    for u in pts:
        lr_eff = centre * 10.0 ** (lr_width * (2.0 * u[0] - 1.0))
        hp, j = {"lr_eff": lr_eff, "lr": lr_eff}, 1
        if optimizer != "sgd":
            lo, hi = map(math.log10, ONE_MINUS_MOMENTUM)
            one_minus = 10.0 ** (lo + u[j] * (hi - lo))
            hp.update(momentum=1.0 - one_minus, lr=lr_eff * one_minus)
            j += 1
        if decay:
            hp.update(decay_fraction=0.5 + 0.5 * u[j], final_lr_fraction=10.0 ** (-2.0 * u[j + 1]))
        out.append(hp)
    out.sort(key=lambda h: abs(math.log(h["lr_eff"] / centre)))
    return out


def max_steps_for(batch_size, n_train, max_epochs, min_steps, max_steps):
    return int(min(max(math.ceil(max_epochs * n_train / batch_size), min_steps), max_steps))


def _accepts_measure(fn):
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "measure" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def run_batch(trial, batch_size, hparams_list, targets, max_steps):
    """All trials of one batch size with pruning. Returns {"trials": [...], "steps": {target: S|None}}."""
    best = {t: None for t in targets}
    trials = []
    for hp in hparams_list:
        curve, reached = [], {}

        def report(step, metric, b_simple=None):
            curve.append((int(step), float(metric)))
            for t in targets:
                if t not in reached and metric <= t:
                    reached[t] = int(step)
            return any(t not in reached and (best[t] is None or step < best[t]) for t in targets)

        t0 = time.perf_counter()
        trial(batch_size, hp, max_steps, report)
        for t, s in reached.items():
            if best[t] is None or s < best[t]:
                best[t] = s
        trials.append({"hparams": hp, "reached": {str(t): s for t, s in reached.items()},
                       "evals": len(curve), "last": curve[-1] if curve else None,
                       "seconds": round(time.perf_counter() - t0, 3)})
    return {"trials": trials, "steps": {str(t): best[t] for t in targets}}


def _best_trial(batch_result, target):
    hits = [(tr["reached"][str(target)], i) for i, tr in enumerate(batch_result["trials"])
            if str(target) in tr["reached"]]
    return batch_result["trials"][min(hits)[1]] if hits else None


def measure_run(trial, batch_size, hparams, targets, max_steps):
    """Rerun one configuration with the live noise scale on; B_simple when each target is first met."""
    traj, at = [], {}

    def report(step, metric, b_simple=None):
        traj.append((int(step), float(metric), b_simple))
        for t in targets:
            if str(t) not in at and metric <= t:
                at[str(t)] = b_simple
        return len(at) < len(targets)

    trial(batch_size, hparams, max_steps, report, measure=True)
    return {"batch": batch_size, "hparams": hparams, "trajectory": traj, "b_simple_at_target": at}


_POOL_TRIALS = None   # the trials, inherited by forked pool workers (never pickled: they hold the data)


def _batch_task(task):
    """All trials of one (series, batch size): the unit of work, run in the parent or a pool worker."""
    name, b, hps, targets, ms, centre_lr, lr_width = task
    r = run_batch(_POOL_TRIALS[name][1], b, hps, targets, ms)
    r["max_steps"] = ms
    best = _best_trial(r, targets[-1]) or _best_trial(r, targets[0])
    if best is not None:
        r["best_at_edge"] = abs(math.log10(best["hparams"]["lr_eff"] / centre_lr)) > 0.8 * lr_width
    return name, b, r


def sweep(trials, batch_sizes, targets, n_trials=8, n_train=60000, max_epochs=6.0, min_steps=400,
          max_steps=20000, lr_center=1.0, lr_width=1.0, decay=True, measure_batch=None, log=print, jobs=1):
    """trials: {series name: (optimizer kind for the search space, trial callable)}. Returns the
    JSON-ready result (see module doc). jobs > 1 runs the (series, batch size) units in that many forked
    processes (one trial is single-threaded, so --jobs 2 uses both cores of a 2-core machine)."""
    global _POOL_TRIALS
    targets = sorted(targets, reverse=True)   # loosest first; the last is the main target
    result = {"batch_sizes": list(batch_sizes), "targets": targets, "n_trials": n_trials,
              "lr_center": lr_center, "lr_width": lr_width, "decay": decay, "series": {}}
    tasks = [(name, b, sample_hparams(kind, b, n_trials, lr_center, lr_width, decay), targets,
              max_steps_for(b, n_train, max_epochs, min_steps, max_steps), lr_center * math.sqrt(b / 128.0),
              lr_width) for name, (kind, _) in trials.items() for b in batch_sizes]
    tasks.sort(key=lambda t: t[1])            # small batches (most steps) first: better load balance
    _POOL_TRIALS = trials
    per_series = {name: {} for name in trials}
    if jobs > 1:
        import multiprocessing
        pool = multiprocessing.get_context("fork").Pool(jobs)
        done = pool.imap_unordered(_batch_task, tasks)
    else:
        pool, done = None, map(_batch_task, tasks)
    try:
        for name, b, r in done:
            per_series[name][str(b)] = r
            secs = sum(x["seconds"] for x in r["trials"])
            log(f"[sweep] {name} B={b}: steps " + ", ".join(
                f"{t}->{r['steps'][str(t)]}" for t in targets) + f" ({secs:.1f}s)")
    finally:
        if pool is not None:
            pool.terminate()
    for name, (kind, trial) in trials.items():
        per_batch = {str(b): per_series[name][str(b)] for b in batch_sizes}
        fits = {str(t): fit_steps(batch_sizes, [per_batch[str(b)]["steps"][str(t)] for b in batch_sizes])
                for t in targets}
        series = {"kind": kind, "per_batch": per_batch, "fits": fits}
        mb = measure_batch or _nearest(batch_sizes, (fits[str(targets[-1])] or {}).get("b_crit"))
        best = _best_trial(per_batch[str(mb)], targets[-1]) or _best_trial(per_batch[str(mb)], targets[0])
        t_measure = time.perf_counter()
        if best is not None and _accepts_measure(trial):
            series["measure"] = measure_run(trial, mb, best["hparams"], targets,
                                            per_batch[str(mb)]["max_steps"])
        series["seconds"] = round(sum(x["seconds"] for r in per_batch.values() for x in r["trials"])
                                  + time.perf_counter() - t_measure, 1)
        for t in targets:
            f, bs = fits[str(t)], series.get("measure", {}).get("b_simple_at_target", {}).get(str(t))
            log(f"[sweep] {name} target {t}: B_crit=" + ("n/a" if f is None else f"{f['b_crit']:.0f}, S_min="
                f"{f['s_min']:.0f}") + f", live B_simple={'n/a' if bs is None else format(bs, '.0f')}")
        result["series"][name] = series
    return result


def _nearest(batch_sizes, b=None):
    """The batch size closest to b on a log scale (default: to the geometric middle of the list)."""
    b = b or math.exp(np.mean(np.log(batch_sizes)))
    return min(batch_sizes, key=lambda x: abs(math.log(x / b)))


def _load_user_trial(spec):
    mod, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"--train must be 'module:function', got {spec!r}")
    return getattr(importlib.import_module(mod), attr)


def _parser():
    p = argparse.ArgumentParser(prog="python -m pyhorovod.scaling.sweep", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--batch-sizes", default="8,16,32,64,128,256,512,1024,2048,4096", help="comma-separated")
    p.add_argument("--trials", type=int, default=8, help="quasi-random trials per batch size")
    p.add_argument("--optimizers", default="sgd,momentum,nesterov", help="comma-separated, of: sgd, momentum, nesterov")
    p.add_argument("--targets", default="0.55,0.5,0.45", help="validation metric targets; the lowest is main")
    p.add_argument("--metric", choices=("loss", "error"), default="loss", help="what --targets bound")
    p.add_argument("--max-epochs", type=float, default=6.0, help="step budget per trial: epochs / B ...")
    p.add_argument("--min-steps", type=int, default=400, help="... but at least this many steps ...")
    p.add_argument("--max-steps", type=int, default=20000, help="... and at most this many")
    p.add_argument("--lr-center", type=float, default=1.0, help="effective LR at batch 128 (search centre)")
    p.add_argument("--lr-width", type=float, default=1.0, help="decades searched on each side")
    p.add_argument("--no-decay", action="store_true", help="constant LR (no linear-decay dimensions)")
    p.add_argument("--hidden", type=int, default=64, help="MLP hidden units (0: softmax regression)")
    p.add_argument("--pool", type=int, default=2, help="average-pool the 28x28 images by this factor")
    p.add_argument("--n-train", type=int, default=None, help="first N training examples (None: all 60000)")
    p.add_argument("--n-val", type=int, default=5000, help="validation examples")
    p.add_argument("--measure-workers", type=int, default=8, help="in-process workers for B_simple (0: off)")
    p.add_argument("--measure-batch", type=int, default=None, help="batch of the B_simple rerun")
    p.add_argument("--ema-beta", type=float, default=0.95, help="smoothing of the B_simple EMAs")
    p.add_argument("--train", default=None, help="module:function, a user trial (see trial.py)")
    p.add_argument("--user-n-train", type=int, default=60000, help="training-set size for a user trial")
    p.add_argument("--seed", type=int, default=0, help="seed of each trial's model initialisation and batch order")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per trial")
    p.add_argument("--jobs", type=int, default=1, help="batch sizes trained in parallel (forked processes)")
    p.add_argument("--out", default="sweep", help="output prefix: writes OUT.json and OUT.png")
    p.add_argument("--no-plot", action="store_true", help="write no PNG")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def main(argv=None):
    args = _parser().parse_args(argv)
    batch_sizes = sorted(int(b) for b in args.batch_sizes.split(","))
    targets = [float(t) for t in args.targets.split(",")]
    if not batch_sizes or batch_sizes[0] < 1 or args.trials < 1 or not targets or args.jobs < 1:
        raise ValueError("need positive batch sizes, --trials >= 1, --jobs >= 1 and at least one target")
    if args.measure_batch is not None and args.measure_batch not in batch_sizes:
        raise ValueError(f"--measure-batch {args.measure_batch} is not one of --batch-sizes")
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    t0 = time.perf_counter()
    if args.train:
        trials = {"user": ("momentum", _load_user_trial(args.train))}
        n_train = args.user_n_train
        if "torch" in sys.modules:    # a user trial that uses torch gets the same thread count
            sys.modules["torch"].set_num_threads(args.threads)
    else:
        import torch
        torch.set_num_threads(args.threads)
        from .trial import FashionMnistTrial
        trials, n_train = {}, None
        for opt in args.optimizers.split(","):
            tr = FashionMnistTrial(opt, hidden=args.hidden, pool=args.pool, n_train=args.n_train,
                                   n_val=args.n_val, metric=args.metric, seed=args.seed,
                                   ema_beta=args.ema_beta)
            n_train = len(tr.x)
            trials[opt] = (opt, _MeasuringTrial(tr, args.measure_workers))
    res = sweep(trials, batch_sizes, targets, args.trials, n_train, args.max_epochs, args.min_steps,
                args.max_steps, args.lr_center, args.lr_width, not args.no_decay, args.measure_batch, log,
                args.jobs)
    res.update(metric=args.metric, argv=list(sys.argv[1:] if argv is None else argv),
               seconds=round(time.perf_counter() - t0, 1))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(res, f, indent=1)
    if not args.no_plot:
        from .sweep_plot import plot_sweep
        plot_sweep(res, args.out + ".png")
    log(f"[sweep] wrote {args.out}.json" + ("" if args.no_plot else f" and {args.out}.png")
        + f" in {res['seconds']}s")
    return res


class _MeasuringTrial:
    """Adapts FashionMnistTrial to the measure= protocol (in-process workers only on the rerun)."""

    def __init__(self, trial, workers):
        self.trial, self.workers = trial, workers

    def __call__(self, batch_size, hparams, max_steps, report, measure=False):
        k = self.workers if measure and self.workers >= 2 and batch_size >= 2 * self.workers else 0
        self.trial.measure_workers = k
        try:
            return self.trial(batch_size, hparams, max_steps, report)
        finally:
            self.trial.measure_workers = 0


if __name__ == "__main__":
    main()
