"""Live gradient noise scale from data-parallel training (McCandlish et al. 2018, appendix A.1).

Terms. G is the true gradient of the expected loss; Sigma is the covariance of one example's gradient, so
a gradient averaged over B independent examples, g_B, satisfies

    E|g_B|^2 = |G|^2 + tr(Sigma) / B.

Data-parallel training computes two such averages every step at no extra cost: each of K workers' local
gradient over B_small examples (before the allreduce) and their mean over B_big = K * B_small examples
(after it). With A_s = mean_k |g_k|^2 and A_b = |mean_k g_k|^2 the two equations solve to

    |G|^2     ~ (B_big * A_b - B_small * A_s) / (B_big - B_small)
    tr(Sigma) ~ (A_s - A_b) / (1/B_small - 1/B_big)

which are unbiased because expectation is linear. Single-step values are very noisy (|G|^2 is often
negative), so each is smoothed by its own bias-corrected exponential moving average and the noise scale
is the ratio of the two averages, B_simple = EMA[tr(Sigma)] / EMA[|G|^2] -- never an average of per-step
ratios, which is biased and undefined whenever a step's |G|^2 < 0.

How B_small and B_big are chosen (`for_config`):
  * K >= 2 workers: B_small = local batch x backward_passes_per_step (accumulated micro-batches are
    simply more samples of the same worker), B_big = B_small x K.
  * one worker with backward_passes_per_step = m >= 2: the m micro-batches play the workers' part:
    B_small = local batch, B_big = local batch x m, A_s = mean over micro-batches of |g_micro|^2.
  * one worker, m = 1: one gradient per step cannot separate signal from noise; `report()` says so.

What the caller must feed (`update`): squared norms of gradients of the *mean* loss over the B_small
(resp. B_big) examples, taken *before* gradient clipping. Two scale factors commonly break that:
  * AMP loss scaling: gradients are multiplied by the loss scale S until `unscale_`. Either unscale before
    computing the norms or pass `grad_scale=S` (both squared norms are divided by S^2); with
    DistributedOptimizer, whose hooks see the scaled gradients, set
    `optimizer.noise_scale_estimator.grad_scale = scaler.get_scale()` before each step. A scale that
    changes between steps would otherwise mix units inside the EMAs. Non-finite inputs (the steps that
    GradScaler skips) are ignored and counted in `skipped`.
  * Summed micro-batches: Horovod accumulates (sums) gradients over backward_passes_per_step; if the loss
    is not divided by m, pass `grad_scale=m`.
The ratio B_simple is invariant to a constant scale; |G|^2 and tr(Sigma) are not.

Temperature (McCandlish section 2.3) is lr / B_big: at a fixed temperature, the training dynamics of SGD
are roughly batch-size independent, so noise-scale readings are comparable only at similar temperatures.

Per parameter group: pass vectors (one entry per group) instead of scalars; every statistic is kept per
group and the whole-model values are the sums over groups (squared norms add across disjoint
parameters, and the EMAs are linear, so the sum of the groups' EMAs is the EMA of the sums).
"""
import math

import numpy as np

from .advisor import Advisor


class _BiasCorrectedEMA:
    """m_t = beta m_{t-1} + (1 - beta) x_t, reported as m_t / (1 - beta^t) so early values are not pulled
    towards the zero initialisation (Adam's correction). One entry per group, kept as Python floats: this
    runs every training step, where numpy's per-call overhead on 1-element arrays would dominate."""

    def __init__(self, beta, n):
        self.beta = beta
        self.t = 0
        self.m = [0.0] * n

    def update(self, xs):
        self.t += 1
        b = self.beta
        self.m = [b * m + (1.0 - b) * x for m, x in zip(self.m, xs)]

    def value(self):
        if self.t == 0:
            return None
        c = 1.0 - self.beta ** self.t
        return [m / c for m in self.m]


def horizon_beta(horizon_examples, b_big):
    """EMA beta whose horizon 1/(1 - beta) spans `horizon_examples` examples at B_big per step."""
    if not horizon_examples > b_big >= 1:
        raise ValueError(f"the EMA horizon ({horizon_examples} examples) must exceed one step's B_big={b_big}")
    return 1.0 - b_big / float(horizon_examples)


def unbiased_estimates(local_sq_mean, global_sq, b_small, b_big):
    """Per-step unbiased estimates (|G|^2, tr(Sigma)) from A_s, A_b (floats or numpy arrays)."""
    grad_sq = (b_big * global_sq - b_small * local_sq_mean) / (b_big - b_small)
    trace_sigma = (local_sq_mean - global_sq) / (1.0 / b_small - 1.0 / b_big)
    return grad_sq, trace_sigma


def _floats(x):
    """A float, or a sequence/array of them, as a list of Python floats."""
    if isinstance(x, (int, float)):
        return [float(x)]
    if isinstance(x, (list, tuple)) and all(isinstance(v, (int, float)) for v in x):
        return [float(v) for v in x]   # the optimizer's per-step case: no numpy round trip (~10 us)
    return [float(v) for v in np.asarray(x, dtype=np.float64).reshape(-1)]


def _num(x):
    """float for JSON/printing; None for 'not defined'."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


class NoiseScaleEstimator:
    """Bias-corrected EMAs of the unbiased |G|^2 and tr(Sigma) estimates; B_simple = their ratio.

    b_small, b_big: the two batch sizes (examples) whose squared gradient norms `update` receives;
        b_big == b_small marks the "cannot estimate" configuration (one worker, one micro-batch).
    ema_beta: smoothing of both EMAs (0.99 ~ the last 100 steps).
    groups: number of parameter groups (vector updates), or a list of their names.
    workers, local_batch: describe the run for the advisor (default: b_big / b_small workers of b_small).
    log_every, log_fn: call log_fn(summary line) every log_every updates (the optimizer passes the INFO
        method of the "pyhorovod.scaling.noise_scale" logger on rank 0 only).
    """

    def __init__(self, b_small, b_big, ema_beta=0.99, groups=1, workers=None, local_batch=None,
                 backward_passes_per_step=1, mode=None, log_every=0, log_fn=None, advisor=None):
        if not (isinstance(b_small, (int, np.integer)) and b_small >= 1):
            raise ValueError(f"b_small must be a positive integer, got {b_small!r}")
        if not (isinstance(b_big, (int, np.integer)) and b_big >= b_small):
            raise ValueError(f"b_big must be an integer >= b_small={b_small}, got {b_big!r}")
        if not 0.0 <= ema_beta < 1.0:
            raise ValueError(f"ema_beta must be in [0, 1), got {ema_beta!r}")
        if isinstance(groups, int):
            if groups < 1:
                raise ValueError(f"groups must be >= 1, got {groups}")
            self.group_names = [str(i) for i in range(groups)]
        else:
            self.group_names = [str(g) for g in groups]
            if not self.group_names:
                raise ValueError("groups must not be empty")
        if log_every < 0:
            raise ValueError(f"log_every must be >= 0, got {log_every}")
        self.b_small = int(b_small)
        self.b_big = int(b_big)
        self.ema_beta = float(ema_beta)
        self.available = self.b_big > self.b_small
        self.mode = mode or ("workers" if self.available else "unavailable")
        self.reason = None if self.available else (
            "cannot estimate the noise scale: one worker with backward_passes_per_step=1 gives one gradient "
            "per step; run on >= 2 workers or with backward_passes_per_step >= 2")
        ngroups = len(self.group_names)
        self._grad_sq = _BiasCorrectedEMA(self.ema_beta, ngroups)
        self._trace = _BiasCorrectedEMA(self.ema_beta, ngroups)
        self.grad_scale = 1.0  # AMP loss scale etc. of the squared norms fed to update(); see module doc
        self.lr = None
        self.step = 0          # accepted updates
        self.skipped = 0       # non-finite inputs ignored
        self.calls = 0
        self.workers = int(workers) if workers is not None else max(1, self.b_big // self.b_small)
        self.local_batch = int(local_batch) if local_batch is not None else self.b_small
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.log_every = int(log_every)
        self.log_fn = log_fn
        self.advisor = advisor
        self.adascale = None   # set by adascale.AdaScalePolicy (lr_scaling="adascale")
        self.last_step_time = None   # (seconds, of which waiting on communication) of the last step timed

    @classmethod
    def for_config(cls, local_batch, size, backward_passes_per_step=1, **kwargs):
        """The estimator for K=size workers of `local_batch` examples per backward pass (module doc)."""
        if local_batch < 1 or size < 1 or backward_passes_per_step < 1:
            raise ValueError(f"local_batch, size and backward_passes_per_step must be >= 1, got "
                             f"{local_batch}, {size}, {backward_passes_per_step}")
        m = backward_passes_per_step
        common = dict(workers=size, local_batch=local_batch, backward_passes_per_step=m)
        if size >= 2:
            return cls(local_batch * m, local_batch * m * size, mode="workers", **common, **kwargs)
        if m >= 2:
            return cls(local_batch, local_batch * m, mode="micro_batches", **common, **kwargs)
        return cls(local_batch, local_batch, mode="unavailable", **common, **kwargs)

    @property
    def global_batch(self):
        return self.local_batch * self.backward_passes_per_step * self.workers

    def update(self, local_sq_mean, global_sq, lr=None, grad_scale=None):
        """Feed one step: local_sq_mean = A_s (mean over workers of |g_k|^2 over B_small examples),
        global_sq = A_b (|mean gradient|^2 over B_big). Scalars, or vectors with one entry per group.
        Returns the step's (unsmoothed) estimates as (grad_sq, trace_sigma) lists, or None if ignored."""
        self.calls += 1
        if lr is not None:
            self.lr = float(lr)
        if not self.available:
            return None
        a_s, a_b = _floats(local_sq_mean), _floats(global_sq)
        if len(a_s) != len(self.group_names) or len(a_b) != len(a_s):
            raise ValueError(f"expected {len(self.group_names)} value(s) per argument (one per group), got "
                             f"shapes {np.shape(local_sq_mean)} and {np.shape(global_sq)}")
        if not all(math.isfinite(v) for v in a_s + a_b):
            self.skipped += 1
            return None
        scale = self.grad_scale if grad_scale is None else float(grad_scale)
        inv = 1.0 / (scale * scale)
        est = [unbiased_estimates(s_ * inv, b_ * inv, self.b_small, self.b_big) for s_, b_ in zip(a_s, a_b)]
        g, tr = [e[0] for e in est], [e[1] for e in est]
        self._grad_sq.update(g)
        self._trace.update(tr)
        self.step += 1
        if self.log_fn is not None and self.log_every and self.step % self.log_every == 0:
            self.log_fn(self.summary())
        return g, tr

    def record_step_time(self, seconds, sync_seconds=0.0):
        """Wall time of one optimizer step (and the part spent waiting for communication): enables the
        advisor's throughput and goodput fields in report()."""
        self.last_step_time = (float(seconds), float(sync_seconds))
        if self.advisor is None:
            self.advisor = Advisor(local_batch=self.local_batch, workers=self.workers,
                                   backward_passes_per_step=self.backward_passes_per_step)
        self.advisor.observe_step(seconds, sync_seconds)

    # ---- reading --------------------------------------------------------------------------------

    def _ratio(self, g, tr):
        if g is None or tr is None or not g > 0 or not tr >= 0:
            return None   # |G|^2 EMA still <= 0 (early, or the noise dominates): not defined yet
        return float(tr / g)

    def b_simple(self):
        g, tr = self._grad_sq.value(), self._trace.value()
        if g is None:
            return None
        return self._ratio(sum(g), sum(tr))

    def report(self):
        """Dict with b_simple, grad_sq (|G|^2), trace_sigma (tr Sigma), b_small, b_big, step, temperature
        (lr / B_big), lr, and the advisor's fields once step times are known. None means undefined."""
        g, tr = self._grad_sq.value(), self._trace.value()
        total_g = None if g is None else sum(g)
        total_tr = None if tr is None else sum(tr)
        rep = {
            "b_simple": self._ratio(total_g, total_tr),
            "grad_sq": _num(total_g),
            "trace_sigma": _num(total_tr),
            "b_small": self.b_small,
            "b_big": self.b_big,
            "step": self.step,
            "lr": self.lr,
            "temperature": None if self.lr is None else self.lr / self.b_big,
            "ema_beta": self.ema_beta,
            "available": self.available,
            "mode": self.mode,
            "skipped": self.skipped,
            "workers": self.workers,
            "global_batch": self.global_batch,
        }
        if not self.available:
            rep["reason"] = self.reason
        if len(self.group_names) > 1 and g is not None:
            rep["groups"] = {
                name: {"b_simple": self._ratio(g[i], tr[i]), "grad_sq": _num(g[i]),
                       "trace_sigma": _num(tr[i])}
                for i, name in enumerate(self.group_names)}
        if self.adascale is not None:
            rep["adascale_gain"] = self.adascale.gain
            rep["adascale_progress"] = self.adascale.progress
        if self.advisor is not None and rep["b_simple"] is not None:
            rep.update(self.advisor.advise(rep["b_simple"], step=self.step))
        return rep

    def summary(self):
        """One line for rank 0's log."""
        rep = self.report()
        if not self.available:
            return "[noise-scale] " + self.reason
        if rep["b_simple"] is None:
            return (f"[noise-scale] step {self.step}: B_simple not defined yet (EMA of |G|^2 = "
                    f"{rep['grad_sq']}); batch {self.global_batch}")
        head = (f"[noise-scale] step {self.step}: B_simple={rep['b_simple']:.0f} "
                f"(|G|^2={rep['grad_sq']:.3g}, trS={rep['trace_sigma']:.3g}, T={_fmt(rep['temperature'])})")
        if self.advisor is not None:
            return head + " | " + self.advisor.summary(rep)
        return head + f" | batch {self.global_batch}"

    def state_dict(self):
        return {"grad_sq_m": list(self._grad_sq.m), "trace_m": list(self._trace.m),
                "t": self._grad_sq.t, "step": self.step, "skipped": self.skipped, "lr": self.lr,
                "b_small": self.b_small, "b_big": self.b_big, "ema_beta": self.ema_beta}

    def continue_from(self, state):
        """Takes over the EMAs of another estimator's state_dict() even if its batch sizes differ (a resized
        elastic job): the smoothed |G|^2 and tr(Sigma) are estimates of properties of the model and the
        data, not of the batch, so they stay valid across a resize."""
        self._grad_sq.m = [float(v) for v in state["grad_sq_m"]]
        self._trace.m = [float(v) for v in state["trace_m"]]
        self._grad_sq.t = self._trace.t = int(state["t"])

    def load_state_dict(self, state):
        if (state["b_small"], state["b_big"]) != (self.b_small, self.b_big):
            raise ValueError(f"state is for b_small={state['b_small']}, b_big={state['b_big']}, this "
                             f"estimator has {self.b_small}, {self.b_big}")
        self._grad_sq.m = [float(v) for v in state["grad_sq_m"]]
        self._trace.m = [float(v) for v in state["trace_m"]]
        self._grad_sq.t = self._trace.t = int(state["t"])
        self.step, self.skipped, self.lr = int(state["step"]), int(state["skipped"]), state["lr"]


def _fmt(x):
    return "?" if x is None else f"{x:.3g}"
