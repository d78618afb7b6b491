"""Learning-rate scaling rules and gradual warmup for large global batches.

Terms:
  base_lr      the LR tuned for a batch of `base_batch` examples per optimizer step;
  global_batch the examples that contribute to one optimizer step across all workers
               (local batch x backward_passes_per_step x number of workers);
  k            global_batch / base_batch.

Rules: "linear" multiplies the LR by k (Goyal et al. 2017, "Accurate, Large Minibatch SGD": with gradual
warmup, ResNet-50 at batch 8k matched batch 256), "sqrt" by sqrt(k) (the variance-preserving alternative,
common with Adam), "none" leaves it. Gradual warmup starts at base_lr and adds a constant amount each step
so that the scaled LR is reached after `warmup_steps` steps (Goyal et al. used 5 epochs): a large LR
applied at once, while the weights change fast, diverges early in training.

Framework-free: the scheduler only touches `optimizer.param_groups[i]["lr"]`, so it works with any torch
optimizer without this module importing torch.
"""
import math
from typing import Optional

RULES = ("linear", "sqrt", "none")


def scale_factor(rule: Optional[str] = "linear", base_batch: Optional[float] = None,
                 global_batch: Optional[float] = None) -> float:
    """The LR multiplier of a scaling rule for going from ``base_batch`` to ``global_batch`` examples.

    Args:
        rule: ``"linear"`` (k = global_batch / base_batch), ``"sqrt"`` (sqrt(k)) or ``"none"`` / None (1).
        base_batch: the batch the LR was tuned for.
        global_batch: the examples of one optimizer step over all workers.

    Returns:
        The factor, a float.

    Raises:
        ValueError: an unknown rule, or a batch that is missing or not positive.
    """
    if rule is None:
        rule = "none"
    if rule not in RULES:
        raise ValueError("unknown LR scaling rule %r: expected one of %s" % (rule, ", ".join(RULES)))
    if rule == "none":
        return 1.0
    for label, value in (("base_batch", base_batch), ("global_batch", global_batch)):
        if value is None:
            raise ValueError("LR scaling rule %r needs %s" % (rule, label))
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError("%s must be a positive number, got %r" % (label, value))
    k = float(global_batch) / float(base_batch)
    return k if rule == "linear" else math.sqrt(k)


def scaled_lr(base_lr: float, rule: Optional[str] = "linear", base_batch: Optional[float] = None,
              global_batch: Optional[float] = None) -> float:
    """The LR for ``global_batch`` examples per step, given ``base_lr`` tuned for ``base_batch``.

    ``scaled_lr(0.1, "linear", base_batch=256, global_batch=1024)`` is 0.4; with ``"sqrt"`` it is 0.2.
    The rules are those of :func:`scale_factor`.

    Raises:
        ValueError: a negative base_lr, or what :func:`scale_factor` refuses.
    """
    if not isinstance(base_lr, (int, float)) or isinstance(base_lr, bool) or base_lr < 0:
        raise ValueError("base_lr must be a non-negative number, got %r" % (base_lr,))
    return float(base_lr) * scale_factor(rule, base_batch, global_batch)


def warmup_steps_from(warmup_steps=None, warmup_epochs=None, steps_per_epoch=None):
    """Resolves the warmup length in optimizer steps; 0 means no warmup. Epochs may be fractional."""
    if warmup_steps is not None and warmup_epochs is not None:
        raise ValueError("give warmup_steps or warmup_epochs, not both")
    if warmup_epochs is not None:
        if steps_per_epoch is None:
            raise ValueError("warmup_epochs needs steps_per_epoch (optimizer steps in one epoch)")
        if not steps_per_epoch > 0:
            raise ValueError("steps_per_epoch must be > 0, got %r" % (steps_per_epoch,))
        if not warmup_epochs >= 0:
            raise ValueError("warmup_epochs must be >= 0, got %r" % (warmup_epochs,))
        return int(round(warmup_epochs * steps_per_epoch))
    if warmup_steps is None:
        return 0
    if isinstance(warmup_steps, bool) or int(warmup_steps) != warmup_steps or warmup_steps < 0:
        raise ValueError("warmup_steps must be a non-negative integer, got %r" % (warmup_steps,))
    return int(warmup_steps)


def warmup_multiplier(step, factor, warmup_steps):
    """LR multiplier at optimizer step `step` (0-based: the step about to be taken).

    Grows linearly from 1 at step 0 to `factor` at step `warmup_steps` and stays there:
    1 + (factor - 1) * min(step / warmup_steps, 1). Without warmup it is `factor` from the start.
    """
    if step < 0:
        raise ValueError("step must be >= 0, got %r" % (step,))
    if warmup_steps <= 0 or step >= warmup_steps:
        return float(factor)
    return 1.0 + (float(factor) - 1.0) * step / float(warmup_steps)


class LinearWarmup:
    """Gradual linear warmup of every param group's LR from its base value to base x factor.

    Usage (one call of .step() after each optimizer.step(), like a torch LR scheduler)::

        factor = scale_factor("linear", base_batch=64, global_batch=64 * hvd.size())
        warmup = LinearWarmup(optimizer, factor, warmup_epochs=5, steps_per_epoch=len(loader))
        for batch in loader: ...; optimizer.step(); warmup.step()

    The base LRs are the groups' LRs at construction. After the warmup the scheduler keeps setting
    base x factor; it overwrites the LR, so do not chain it with another scheduler on the same groups
    (DistributedOptimizer(lr_scaling=...) composes with user schedulers instead).
    """

    def __init__(self, optimizer, factor, warmup_steps=None, warmup_epochs=None, steps_per_epoch=None,
                 last_step=0):
        if not isinstance(factor, (int, float)) or not factor > 0:
            raise ValueError("factor must be a positive number, got %r" % (factor,))
        self.optimizer = optimizer
        self.factor = float(factor)
        self.warmup_steps = warmup_steps_from(warmup_steps, warmup_epochs, steps_per_epoch)
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.last_step = int(last_step)
        self._apply()

    def multiplier(self, step=None):
        """The LR multiplier at optimizer step ``step`` (default: the current one), from 1 to the factor."""
        return warmup_multiplier(self.last_step if step is None else step, self.factor, self.warmup_steps)

    def lr_at(self, step):
        """The LRs (one per param group) used by optimizer step `step`."""
        m = self.multiplier(step)
        return [base * m for base in self.base_lrs]

    def get_last_lr(self):
        """The LRs the param groups hold now, one per group (as torch schedulers answer)."""
        return [group["lr"] for group in self.optimizer.param_groups]

    def step(self):
        """Advances to the next optimizer step and sets every param group's LR for it."""
        self.last_step += 1
        self._apply()

    def _apply(self):
        for group, lr in zip(self.optimizer.param_groups, self.lr_at(self.last_step)):
            group["lr"] = lr

    def state_dict(self):
        """The scheduler's state (factor, warmup length, base LRs, current step), for checkpoints."""
        return {"factor": self.factor, "warmup_steps": self.warmup_steps, "base_lrs": list(self.base_lrs),
                "last_step": self.last_step}

    def load_state_dict(self, state):
        """Restores a :meth:`state_dict` and sets the param groups' LRs for its step."""
        self.factor = float(state["factor"])
        self.warmup_steps = int(state["warmup_steps"])
        self.base_lrs = list(state["base_lrs"])
        self.last_step = int(state["last_step"])
        self._apply()


class ResizeWarmup:
    """The LR multiplier across the resizes of an elastic job.

    At every resize the job's rule gives a new target multiplier for the new global batch (linear or
    sqrt: `scale_factor(rule, base_batch, new_global_batch)`; AdaScale: its gain, which the caller
    recomputes every step for the new scale). After a grow the multiplier goes from the one the last step
    before the resize applied to the new target linearly over `warmup_steps` steps (a sudden k-fold LR
    on weights tuned for the old batch diverges, as at the start of training); after a shrink the
    smaller target applies at once (a smaller LR is always safe).

    multiplier(step, target) is the small function the optimizer calls every step: `target` is what the
    rule says for the current global batch, the answer is what to apply. log_fn(line) gets one line at
    each resize and one when a warmup ends.
    """

    def __init__(self, warmup_steps=100, log_fn=None):
        self.warmup_steps = warmup_steps_from(warmup_steps)
        self.log_fn = log_fn
        self._from = None      # (step of the resize, multiplier before it) during a warmup
        self._last = None      # the multiplier the last step applied
        self.resizes = []      # (step, old global batch, new global batch, multiplier before)

    def resize(self, step, old_global_batch, new_global_batch):
        """Called once, at the first step after a resize."""
        before = self._last
        self.resizes.append((int(step), old_global_batch, new_global_batch, before))
        grew = new_global_batch > old_global_batch
        self._from = (int(step), before) if grew and before is not None and self.warmup_steps else None
        if self.log_fn is not None:
            how = f"LR multiplier warms up from {before:.4g} over {self.warmup_steps} steps" if self._from \
                else "the rule's LR applies at once"
            self.log_fn(f"resize at step {step}: global batch {old_global_batch} -> {new_global_batch}; {how}")

    def multiplier(self, step, target):
        m = float(target)
        if self._from is not None:
            start, before = self._from
            done = step - start
            if done >= self.warmup_steps or target <= before:
                self._from = None
                if self.log_fn is not None:
                    self.log_fn(f"step {step}: LR warmup after the resize done, multiplier {m:.4g}")
            else:
                m = before + (m - before) * done / self.warmup_steps
        self._last = m
        return m
