"""Steps-to-result arithmetic for the sweep: quasi-random points, steps-to-result, and the S(B) fit.

Steps-to-result (Shallue et al. 2018, section 3): for one batch size and one target, the smallest step
count at which any trial's evaluation first falls at or below the target. Trials that never reach it do
not count; a batch size where none does has no value (None).

The fit: S(B) = S_min (1 + B_crit / B) (McCandlish et al. 2018, eq. 2.11), least squares on log S so that
batch sizes whose step counts differ 100-fold weigh alike. For a fixed B_crit the best log S_min is the
mean of log S_i - log(1 + B_crit/B_i); B_crit itself is found by a grid over log B_crit refined by golden
section, which needs no optimiser library and cannot wander off.
"""
import math

import numpy as np

_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19)


def radical_inverse(i, base):
    """Van der Corput: digits of i in `base` mirrored behind the radix point."""
    out, f = 0.0, 1.0 / base
    while i > 0:
        i, d = divmod(i, base)
        out += d * f
        f /= base
    return out


def halton(n, dims, skip=1):
    """n points of the Halton sequence in [0, 1)^dims (low discrepancy: a few points cover the space
    evenly, unlike independent uniform draws). `skip` drops the degenerate first point 0."""
    if dims > len(_PRIMES):
        raise ValueError(f"at most {len(_PRIMES)} dimensions, got {dims}")
    return np.array([[radical_inverse(i + skip, _PRIMES[d]) for d in range(dims)] for i in range(n)])


def steps_to_result(curves, target):
    """curves: per trial, a list of (step, metric) evaluations. Returns the min over trials of the first
    step whose metric <= target, or None."""
    best = None
    for curve in curves:
        for step, metric in curve:
            if metric <= target:
                best = step if best is None else min(best, step)
                break
    return best


def _sse(log_b, log_s, log_bc):
    resid_base = log_s - np.log1p(np.exp(log_bc - log_b))
    log_smin = resid_base.mean()
    return float(np.sum((resid_base - log_smin) ** 2)), float(log_smin)


def fit_steps(batches, steps):
    """Fit S = S_min (1 + B_crit / B) to the points with a value. Returns a dict with s_min, b_crit,
    rms_log_error, points, at_bound (B_crit pinned at the search edge: the data only bound it), or None
    with fewer than 2 points."""
    pts = [(b, s) for b, s in zip(batches, steps) if s is not None and s > 0]
    if len(pts) < 2:
        return None
    log_b = np.log(np.array([p[0] for p in pts], dtype=np.float64))
    log_s = np.log(np.array([p[1] for p in pts], dtype=np.float64))
    lo, hi = log_b.min() - math.log(1000.0), log_b.max() + math.log(1000.0)
    grid = np.linspace(lo, hi, 401)
    errs = [_sse(log_b, log_s, g)[0] for g in grid]
    i = int(np.argmin(errs))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    phi = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(60):   # golden section inside the bracketing grid cells
        c, d = b - phi * (b - a), a + phi * (b - a)
        if _sse(log_b, log_s, c)[0] < _sse(log_b, log_s, d)[0]:
            b = d
        else:
            a = c
    log_bc = (a + b) / 2.0
    sse, log_smin = _sse(log_b, log_s, log_bc)
    return {"s_min": math.exp(log_smin), "b_crit": math.exp(log_bc),
            "rms_log_error": math.sqrt(sse / len(pts)), "points": len(pts),
            "at_bound": i in (0, len(grid) - 1)}


def predicted_steps(fit, batch):
    return fit["s_min"] * (1.0 + fit["b_crit"] / batch)
