"""The LR scaling that DistributedOptimizer(lr_scaling=...) applies itself (off by default).

The optimizer multiplies each param group's LR by m(t) = warmup_multiplier(t, factor, warmup_steps) only
for the duration of its own step t, and restores the group's LR afterwards. So the user's LR (and any
torch LR scheduler that sets it) stays the *unscaled* base LR and composes with the scaling instead of
being overwritten by it, and a Horovod script that scales the LR itself is not scaled twice unless it
also asks for lr_scaling.

factor: the rule's multiplier for going from base_batch_size to the global batch
(local batch x backward_passes_per_step x workers). Without base_batch_size the base LR is taken to be
tuned for one worker's batch, so factor = workers x backward_passes_per_step for "linear".
"""
import logging

from pyhorovod import _logging, basics
from pyhorovod.scaling.lr import scale_factor, warmup_multiplier, warmup_steps_from

# Rank 0's LR lines: INFO records, shown on stderr to a script that configured no logging
# (pyhorovod/_logging.py show_reports), silenced by logging.getLogger("pyhorovod").setLevel(WARNING).
log = logging.getLogger("pyhorovod.torch.lr")


class LrPolicy:
    def __init__(self, rule, workers, backward_passes_per_step, base_batch_size=None, batch_size=None,
                 warmup_steps=None, warmup_epochs=None, steps_per_epoch=None, verbose=True):
        if rule not in ("linear", "sqrt", "none"):
            raise ValueError(f"lr_scaling={rule!r}: expected None, 'linear', 'sqrt' or 'none'")
        if base_batch_size is not None and batch_size is None:
            raise ValueError("lr_scaling with base_batch_size= needs batch_size= (the local batch of "
                             "one backward pass) to know the global batch")
        self.rule = rule
        self._batch = (base_batch_size, batch_size, backward_passes_per_step)
        self._set_workers(workers)
        self.warmup_steps = warmup_steps_from(warmup_steps, warmup_epochs, steps_per_epoch)
        self.verbose = verbose
        self._logged_final = False
        if verbose and basics.rank() == 0:   # the optimizer logs on rank 0 only (maybe_log)
            _logging.show_reports()

    def _set_workers(self, workers):
        base_batch_size, batch_size, passes = self._batch
        if base_batch_size is None:
            base, global_batch = 1, workers * passes
        else:
            base, global_batch = base_batch_size, batch_size * passes * workers
        self.workers = workers
        self.global_batch = global_batch if base_batch_size is not None else None
        self.factor = scale_factor(self.rule, base, global_batch)

    def rescale(self, workers):
        """After an elastic reset: the rule's factor for the new number of workers (rank 0 logs a change
        at INFO). The warmup goes on from the optimizer's step count."""
        before, old_factor = self.workers, self.factor
        self._set_workers(workers)
        if workers != before and self.verbose and basics.rank() == 0:
            _logging.show_reports()   # this process may be rank 0 only since the reset
            batch = f", global batch {self.global_batch}" if self.global_batch else ""
            log.info("lr_scaling=%s: %d workers instead of %d%s, LR factor x%.4g instead of x%.4g", self.rule,
                     workers, before, batch, self.factor, old_factor)

    def multiplier(self, step):
        return warmup_multiplier(step, self.factor, self.warmup_steps)

    def maybe_log(self, step, lrs):
        """Rank 0 logs the first step, each quarter of the warmup and the step the scaled LR is reached."""
        if not self.verbose:
            return
        w = self.warmup_steps
        first = step == 0
        reached = step >= w and not self._logged_final
        quarter = w >= 4 and 0 < step < w and step % max(1, w // 4) == 0
        if not (first or reached or quarter):
            return
        if reached:
            self._logged_final = True
        batch = f", global batch {self.global_batch}" if self.global_batch else ""
        phase = f"warmup {min(step, w)}/{w}" if w else "no warmup"
        log.info("lr_scaling=%s (x%.4g%s): step %d applies lr %s (%s)", self.rule, self.factor, batch, step,
                 ", ".join(f"{lr:.6g}" for lr in lrs), phase)
