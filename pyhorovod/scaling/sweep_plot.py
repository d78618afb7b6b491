"""PNG for a steps-to-result sweep (the dict sweep.sweep returns).

Left: steps to the main (lowest) target against batch size on log axes for every optimizer, with the
fitted S = S_min (1 + B_crit/B), the three regimes of the main series shaded (perfect scaling B <= B_crit/9,
plateau B >= 9 B_crit: the same 10% thresholds as the advisor), and the live B_simple of each series as a
vertical dashed line. Right: the main series at every target, showing how B_crit moves with the target.

Drawn with matplotlib's object API (Figure + FigureCanvasAgg): the caller's backend is never switched.
Markers mark measured points only; fits are lines; legends sit right of the axes.
"""
import numpy as np


def _figure(ncols, width, height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width * ncols, height), layout="constrained")  # constrained: room for the legends
    FigureCanvasAgg(fig)
    return fig, fig.subplots(1, ncols, squeeze=False)[0]


def _legend_outside(ax, fontsize):
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)


def _main_series(res):
    names = list(res["series"])
    return "momentum" if "momentum" in names else names[0]


def plot_sweep(res, path):
    figure_sweep(res).savefig(path, dpi=90, bbox_inches="tight")


def figure_sweep(res):
    batches = np.array(res["batch_sizes"], dtype=float)
    xs = np.geomspace(batches.min() / 1.5, batches.max() * 1.5, 200)
    main_t = str(res["targets"][-1])
    fig, (ax, ax2) = _figure(2, 7.5, 5.2)
    colors = [f"C{i}" for i in range(10)]
    main = _main_series(res)

    fit = res["series"][main]["fits"].get(main_t)
    if fit:
        bc = fit["b_crit"]
        lo, hi = xs.min(), xs.max()
        spans = [(lo, min(bc / 9, hi), "#d8f0d8", "perfect scaling"),
                 (max(bc / 9, lo), min(9 * bc, hi), "#fdf3cf", "diminishing returns"),
                 (max(9 * bc, lo), hi, "#f6d5d5", "plateau")]
        for a, b, c, label in spans:
            if b > a:
                ax.axvspan(a, b, color=c, zorder=0, label=f"{label} ({main})")
    for i, (name, s) in enumerate(res["series"].items()):
        col = colors[i % len(colors)]
        steps = [s["per_batch"][str(int(b))]["steps"][main_t] for b in batches]
        ok = [(b, st) for b, st in zip(batches, steps) if st is not None]
        if ok:
            ax.plot(*zip(*ok), "o", color=col, label=f"{name}: best of {res['n_trials']} trials")
        f = s["fits"].get(main_t)
        if f:
            ax.plot(xs, f["s_min"] * (1 + f["b_crit"] / xs), "-", color=col, alpha=0.8,
                    label=f"{name} fit: B_crit={f['b_crit']:.0f}, S_min={f['s_min']:.0f}")
        bs = s.get("measure", {}).get("b_simple_at_target", {}).get(main_t)
        if bs:
            ax.axvline(bs, color=col, ls="--", lw=1.2,
                       label=f"{name} live B_simple={bs:.0f} (B={s['measure']['batch']})")
    if fit:
        ax.plot(xs, fit["s_min"] * fit["b_crit"] / xs, ":", color="gray", label="perfect scaling S ~ 1/B")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel(f"steps to validation {res.get('metric', 'loss')} <= {main_t}")
    ax.set_title("steps-to-result, LR (+momentum, decay) tuned per batch size")
    _legend_outside(ax, 7)
    ax.grid(True, which="both", alpha=0.3)

    s = res["series"][main]
    for j, t in enumerate(res["targets"]):
        col = colors[j % len(colors)]
        steps = [s["per_batch"][str(int(b))]["steps"][str(t)] for b in batches]
        ok = [(b, st) for b, st in zip(batches, steps) if st is not None]
        if ok:
            ax2.plot(*zip(*ok), "o", color=col)
        f = s["fits"].get(str(t))
        bs = s.get("measure", {}).get("b_simple_at_target", {}).get(str(t))
        label = f"target {t}: B_crit=" + (f"{f['b_crit']:.0f}" if f else "n/a") + \
            (f", live B_simple={bs:.0f}" if bs else "")
        if f:
            ax2.plot(xs, f["s_min"] * (1 + f["b_crit"] / xs), "-", color=col, label=label)
            ax2.plot([f["b_crit"]], [2 * f["s_min"]], "s", color=col, ms=8)
        if bs:
            ax2.axvline(bs, color=col, ls="--", lw=1)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("batch size")
    ax2.set_ylabel("steps to target")
    ax2.set_title(f"{main}: every target (square: B_crit, dashed: live B_simple)")
    _legend_outside(ax2, 7)
    ax2.grid(True, which="both", alpha=0.3)
    return fig


def plot_b_simple_runs(runs, path, title="live B_simple during training", xlabel="step"):
    """runs: {label: [(x, b_simple), ...]} -> one PNG (e.g. the example at 2 and 4 ranks)."""
    fig, (ax,) = _figure(1, 7, 4.2)
    for label, pts in runs.items():
        pts = [(s, b) for s, b in pts if b is not None]
        if pts:   # each point is a recorded estimate: marked
            ax.plot(*zip(*pts), marker=".", ms=3, label=label)
    ax.axhspan(50, 900, color="#e8e8f8", zorder=0, label="MNIST range in McCandlish et al. (50-900)")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("B_simple (ratio of EMAs)")
    ax.set_title(title)
    _legend_outside(ax, 8)
    ax.grid(True, which="both", alpha=0.3)
    fig.savefig(path, dpi=90, bbox_inches="tight")
