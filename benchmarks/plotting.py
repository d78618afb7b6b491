"""The benchmarks' figures, drawn with matplotlib's object API (Figure + FigureCanvasAgg).

Nothing here imports pyplot or calls matplotlib.use, so importing this module or drawing a figure never
switches the backend of the script or notebook that does it. Conventions every figure follows:
  - sizes on a log2 axis, ticks at the measured sizes labelled 4, 4K, 1M, 64M (binary units);
  - times on a log axis (a linear one flattens the small-message points to 0);
  - markers only at measured points, lines without markers for models and fits;
  - pyhorovod's lines solid and labelled "(pyhorovod)", peers' dashed and labelled "(peer)";
  - legends outside the axes, right of them.
"""
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

MAX_SIZE_TICKS = 10


def new_figure(nrows=1, ncols=1, width=5.5, height=3.8):
    """(figure, axes as an nrows x ncols list of lists), each panel width x height inches."""
    # constrained layout makes room for legends outside the axes (tight_layout ignores them)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def size_label(nbytes):
    """4 -> '4', 4096 -> '4K', 2**20 -> '1M', 64 * 2**20 -> '64M'; sizes between units keep a fraction."""
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= div:
            value = nbytes / div
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{nbytes:.0f}"


def size_axis(ax, sizes, label="message size (bytes)"):
    """x: log2, ticks at the measured sizes (every k-th one if there are many), labelled by size_label."""
    sizes = sorted(set(sizes))
    step = max(1, -(-len(sizes) // MAX_SIZE_TICKS))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sizes[::step]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: size_label(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(label)


def count_axis(ax, counts, label):
    """x: workers or ranks, ticks at the given counts as plain integers (log2 if they span > 8x)."""
    counts = sorted(set(counts))
    if counts[-1] > 8 * counts[0]:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_locator(FixedLocator(counts))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:.0f}"))
    ax.set_xlabel(label)


def log_axis(ax, label, axis="y"):
    """A log-scaled y (or x) axis with its label."""
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    (ax.set_ylabel if axis == "y" else ax.set_xlabel)(label)


def measured(ax, xs, ys, name, ours, role=None, **kwargs):
    """A measured series: markers at the points; solid "name (pyhorovod)" or dashed "name (peer)" (role=
    replaces the word in parentheses, e.g. for a baseline that is neither)."""
    role = role or ("pyhorovod" if ours else "peer")
    return ax.plot(xs, ys, marker="o", ms=3, ls="-" if ours else "--", label=f"{name} ({role})", **kwargs)


def legend_outside(ax, **kwargs):
    """The legend right of the axes, off the curves (save() widens the image to keep it)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=7, **kwargs)


def save(fig, path, dpi=110):
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
