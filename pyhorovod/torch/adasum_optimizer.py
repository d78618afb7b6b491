"""DistributedOptimizer(op=hvd.Adasum): Adasum applied to what each step changes, not to the gradients.

Adasum's rule (csrc/common/adasum.h) is meant for the update an optimizer makes: with momentum or Adam the
step is not a multiple of the gradient, and combining the steps keeps each rank's optimizer state its own.
step() therefore
  1. keeps a copy of every parameter (`start`),
  2. runs the wrapped optimizer's step on the local, unreduced gradients,
  3. takes delta = parameter - start, Adasum-allreduces the deltas over the process set (one request per
     parameter, started together so that the engine may fuse them; dot products stay per tensor), and
  4. sets parameter = start + reduced delta.
The allreduce runs in step(), after backward, so it does not overlap backward as gradient allreduce does.
Gradients are left as the local backward passes accumulated them (backward_passes_per_step is kept for
the API: the step happens when the script calls step()); groups= and sparse_as_dense= do not apply (each
change is one dense request). At one rank (or a process set of one) step() is the wrapped optimizer's
step. Ranks outside the process set take local steps.
"""
import warnings

import torch

from pyhorovod import _api
from pyhorovod.torch import _convert as cv
from pyhorovod.torch import ops
from pyhorovod.torch._optimizer_base import STEP_AFTER_SYNCHRONIZE, _DistributedOptimizer


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    # Copied into a subclass of the wrapped optimizer's class (see DistributedAdasumOptimizer), hence
    # super(self.__class__, self) instead of super().
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, process_set):
        super(self.__class__, self).__init__(params)
        named_parameters = cv.checked_named_parameters(self.param_groups, named_parameters)
        self._parameter_names = {v: k for k, v in named_parameters}
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.process_set = process_set
        self.op = _api.Adasum
        self._should_synchronize = True
        self._synchronized = False
        # Every rank must send the same requests in the same order: sorted by name, all that train.
        self._order = sorted((p for group in self.param_groups for p in group["params"] if p.requires_grad),
                             key=lambda p: self._parameter_names[p])

    def synchronize(self):
        """Gradients are not reduced under Adasum (step() reduces the parameter changes): nothing to wait for.
        Kept so that scripts calling synchronize() + skip_synchronize() run unchanged."""
        self._synchronized = True

    skip_synchronize = _DistributedOptimizer.skip_synchronize
    _local_step = _DistributedOptimizer._local_step   # the wrapped step alone (broadcast_optimizer_state)

    def step(self, closure=None):
        if self._should_synchronize and self._synchronized:
            warnings.warn(STEP_AFTER_SYNCHRONIZE)
        self._synchronized = False
        ps = self.process_set
        if not ps.included() or len(ps.ranks) == 1:
            return self._local_step(closure)
        with torch.no_grad():
            start = [p.detach().clone(memory_format=torch.contiguous_format) for p in self._order]
        loss = self._local_step(closure)
        with torch.no_grad():
            pending = []
            for p, p0 in zip(self._order, start):
                delta, ctx = self._compression.compress(p.detach() - p0)
                handle = ops.allreduce_async_(delta, name="adasum.delta." + self._parameter_names[p],
                                              op=_api.Adasum, process_set=ps)
                pending.append((handle, delta, ctx))
            error = None
            for (handle, _, ctx), p, p0 in zip(pending, self._order, start):
                try:  # wait for every request even after a failure: each still uses its buffers
                    reduced = self._compression.decompress(ops.synchronize(handle), ctx)
                except Exception as e:  # noqa: BLE001 -- re-raised below, after the others are done
                    error = error or e
                    continue
                p.copy_(p0 + reduced.to(p.dtype))
            if error is not None:
                for p, p0 in zip(self._order, start):
                    p.copy_(p0)   # no rank keeps a half-applied step
                raise error
        return loss

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes


def DistributedAdasumOptimizer(optimizer, named_parameters, compression, backward_passes_per_step, process_set):
    """The op=Adasum form of pyhorovod.torch.DistributedOptimizer (which checks the arguments)."""
    attrs = {k: v for k, v in _DistributedAdasumOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")}
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), attrs)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, process_set)
