"""AdaScale-style learning rate from the live noise-scale estimates (Johnson et al. 2020).

Terms. The base configuration is one worker's batch B0 (examples per worker per step, accumulated
micro-batches included); a data-parallel step averages s = B_big / B0 such batches. With mu^2 = |G|^2 and
sigma^2 = tr(Sigma) / B0 (the variance of one base-batch gradient), the gain

    r = (sigma^2 + mu^2) / (sigma^2 / s + mu^2)        in [1, s]

is the ratio of the expected squared norms of a base-batch and an s-times-larger-batch gradient: how many
base steps one large step is worth. AdaScale multiplies the base LR by r (r -> s when noise dominates,
i.e. the linear scaling rule; r -> 1 when the gradient is exact, where a larger batch cannot help) and
counts progress in scale-invariant steps tau_{t+1} = tau_t + r_t: the LR schedule is evaluated at tau,
and training that takes T base steps ends when tau reaches T. In noise-scale terms, with B_noise =
tr(Sigma)/|G|^2, r = (B_noise/B0 + 1) / (B_noise/(s B0) + 1).
"""
import logging
import math

from pyhorovod import _logging

# rank 0's gain lines: INFO records (pyhorovod/_logging.py says when they show without logging set up)
log = logging.getLogger("pyhorovod.scaling.adascale")


def adascale_gain(sigma_sq, mu_sq, scale):
    """r = (sigma^2 + mu^2)/(sigma^2/s + mu^2), clipped to [1, s]. Estimates can be non-positive early
    in training (noisy |G|^2 EMA); then noise dominates and the gain is s."""
    if scale < 1:
        raise ValueError(f"scale must be >= 1, got {scale}")
    if sigma_sq is None or mu_sq is None or not (math.isfinite(sigma_sq) and math.isfinite(mu_sq)):
        return float(scale)
    sigma_sq = max(float(sigma_sq), 0.0)
    if mu_sq <= 0:
        return float(scale)
    r = (sigma_sq + mu_sq) / (sigma_sq / scale + mu_sq)
    return float(min(max(r, 1.0), scale))


def gain_from_noise_scale(b_noise, base_batch, scale):
    """The same gain written with B_noise = tr(Sigma)/|G|^2 and the base batch B0."""
    if base_batch <= 0:
        raise ValueError(f"base_batch must be > 0, got {base_batch}")
    if b_noise is None:
        return float(scale)
    return adascale_gain(b_noise / base_batch, 1.0, scale)


class AdaScale:
    """LR = base_lr(tau) x r_t, with tau the scale-invariant progress.

    base_lr: a float, or a callable tau -> LR of the base (single-worker) schedule.
    scale: s = B_big / B0; base_batch: B0.
    Call update(grad_sq, trace_sigma) once per step with the noise-scale EMAs (NoiseScaleEstimator
    report()['grad_sq'], ['trace_sigma']); it returns the LR for this step and advances tau by r.
    apply(optimizer) writes that LR into every param group, keeping the groups' initial LR ratios.
    """

    def __init__(self, base_lr, scale, base_batch):
        if scale < 1 or base_batch < 1:
            raise ValueError(f"need scale >= 1 and base_batch >= 1, got {scale}, {base_batch}")
        self._schedule = base_lr if callable(base_lr) else (lambda tau, lr=float(base_lr): lr)
        self.scale = float(scale)
        self.base_batch = int(base_batch)
        self.progress = 0.0    # tau: base-batch steps' worth of progress so far
        self.steps = 0
        self.gain = 1.0
        self.lr = self._schedule(0.0)
        self._group_ratio = None

    def update(self, grad_sq, trace_sigma):
        sigma_sq = None if trace_sigma is None else trace_sigma / self.base_batch
        self.gain = adascale_gain(sigma_sq, grad_sq, self.scale)
        self.lr = self._schedule(self.progress) * self.gain
        self.progress += self.gain
        self.steps += 1
        return self.lr

    def apply(self, optimizer):
        groups = optimizer.param_groups
        if self._group_ratio is None:
            first = groups[0]["lr"] or 1.0
            self._group_ratio = [g["lr"] / first for g in groups]
        for g, ratio in zip(groups, self._group_ratio):
            g["lr"] = self.lr * ratio

    def done(self, base_steps):
        """True once the progress reaches the base schedule's length in base-batch steps."""
        return self.progress >= base_steps

    def state_dict(self):
        return {"progress": self.progress, "steps": self.steps, "gain": self.gain, "lr": self.lr}

    def load_state_dict(self, state):
        self.progress, self.steps = float(state["progress"]), int(state["steps"])
        self.gain, self.lr = float(state["gain"]), float(state["lr"])


class AdaScalePolicy:
    """DistributedOptimizer(lr_scaling="adascale") glue: the LR multiplier of step t is the gain r from
    the noise-scale estimator's EMAs (up to the previous step), with base batch B0 = estimator.b_small and
    scale s = b_big / b_small; `progress` is tau, the scale-invariant step count to drive the user's LR
    schedule with (AdaScale evaluates the schedule at tau, not at t); noise_scale_report() carries both
    as adascale_gain and adascale_progress."""

    def __init__(self, estimator, verbose=True, log_every=100):
        self.estimator = estimator
        self.scale = estimator.b_big / estimator.b_small
        self.progress = 0.0
        self.gain = 1.0
        self.verbose, self.log_every = verbose, log_every
        self._step = None
        if verbose and log_every:
            _logging.show_reports()
        estimator.adascale = self   # its report() then carries adascale_gain and adascale_progress

    def multiplier(self, step):
        if step != self._step:   # the optimizer asks more than once per step: advance tau once
            self._step = step
            rep = self.estimator.report()
            sigma_sq = None if rep["trace_sigma"] is None else rep["trace_sigma"] / self.estimator.b_small
            self.gain = adascale_gain(sigma_sq, rep["grad_sq"], self.scale)
            self.progress += self.gain
        return self.gain

    def maybe_log(self, step, lrs):
        if self.verbose and self.log_every and step % self.log_every == 0:
            log.info("lr_scaling=adascale: step %d gain %.3g of %g, progress %.1f base steps, lr %s", step,
                     self.gain, self.scale, self.progress, ", ".join(f"{lr:.6g}" for lr in lrs))
