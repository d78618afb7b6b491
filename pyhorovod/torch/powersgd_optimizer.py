"""DistributedOptimizer with compression=PowerSGD(...): the methods that replace the per-tensor allreduce.

The matrix-shaped parameters that PowerSGD compresses (see PowerSGD.compresses) are "reduced apart": they
are left out of `groups`, and their hooks only collect the gradient. When the last of them is ready (in the
hook, or in synchronize() for those whose hook did not fire) the LowRankReducer starts the step's fused P
allreduce, so it overlaps whatever backward still computes; each of them gets a callable handle that, when
synchronize() first calls one, finishes the step (orthonormalization, the fused Q allreduce, the update)
for all of them. The other parameters go through the usual per-tensor or grouped allreduce, uncompressed.
"""
import torch

from pyhorovod.torch.functions import broadcast_object
from pyhorovod.torch._optimizer_base import _DistributedOptimizer
from pyhorovod.torch.powersgd import LowRankReducer

_STATE_KEY = "pyhorovod_powersgd"


class _PowerSGDMethods:
    # Copied into the optimizer's class next to _DistributedOptimizer's methods (see DistributedOptimizer).

    def _register_hooks(self):
        config = self._low_rank_config
        apart = [p for group in self.param_groups for p in group["params"]
                 if p.requires_grad and config.compresses(p.shape)]
        self._reduced_apart = set(apart)
        self._low_rank_order = sorted(apart, key=lambda p: self._parameter_names[p])
        first = self._parameter_names[self._low_rank_order[0]] if apart else ""
        self._low_rank = LowRankReducer(config, self.op, self.process_set, name=f"PowerSGD.{first}")
        self._low_rank_ready = {}
        self._low_rank_result = None
        state = getattr(self, "_low_rank_restore", None)
        if state is not None:
            self._low_rank.load_state_dict(state)
        _DistributedOptimizer._register_hooks(self)

    def _allreduce_grad_async(self, p):
        if p not in self._reduced_apart:
            return _DistributedOptimizer._allreduce_grad_async(self, p)
        if p.grad is None:
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        self._low_rank_ready[p] = p.grad.to_dense() if p.grad.is_sparse else p.grad
        if len(self._low_rank_ready) == len(self._reduced_apart):
            names = self._parameter_names
            self._low_rank.begin([(names[q], self._low_rank_ready[q]) for q in self._low_rank_order])
        return (lambda: self._low_rank_output(p)), None

    def _low_rank_output(self, p):
        if self._low_rank_result is None:
            outputs = self._low_rank.finish()
            self._low_rank_result = dict(zip(self._low_rank_order, outputs))
        return self._low_rank_result.pop(p)

    def synchronize(self):
        try:
            _DistributedOptimizer.synchronize(self)
        finally:
            if hasattr(self, "_low_rank"):
                self._low_rank_ready, self._low_rank_result = {}, None

    def _abandon_step(self):
        if hasattr(self, "_low_rank"):
            self._low_rank.abandon()
            self._low_rank_ready, self._low_rank_result = {}, None
        _DistributedOptimizer._abandon_step(self)

    def powersgd_iteration(self):
        """Optimizer steps PowerSGD has counted (compression runs from its start_iter on)."""
        return self._low_rank.iteration if hasattr(self, "_low_rank") else 0

    def sync_powersgd_state(self, root_rank, process_set):
        """broadcast_optimizer_state's part: the root's iteration and Q's to every rank of the set (a rank
        that joins an elastic job, or a fresh one, compresses in step with the others); error buffers are
        each rank's residual and stay."""
        if not hasattr(self, "_low_rank"):
            return
        reducer = self._low_rank
        state = broadcast_object({"iteration": reducer.iteration, "qs": reducer.qs}, root_rank,
                                 name="opt_state.powersgd", process_set=process_set)
        reducer.iteration = int(state["iteration"])
        reducer.qs = {k: v.clone() for k, v in state["qs"].items()}

    def state_dict(self):
        state = _DistributedOptimizer.state_dict(self)
        if hasattr(self, "_low_rank"):
            state[_STATE_KEY] = self._low_rank.state_dict()
        elif getattr(self, "_low_rank_restore", None) is not None:
            state[_STATE_KEY] = self._low_rank_restore
        return state

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        low_rank = state_dict.pop(_STATE_KEY, None)
        _DistributedOptimizer.load_state_dict(self, state_dict)
        if low_rank is not None:
            if hasattr(self, "_low_rank"):
                self._low_rank.load_state_dict(low_rank)
                self._low_rank_ready, self._low_rank_result = {}, None
            else:   # a one-rank job keeps it for when it has peers
                self._low_rank_restore = low_rank


def powersgd_attrs(config):
    """The class attributes that turn a DistributedOptimizer class into a PowerSGD one."""
    attrs = {k: v for k, v in _PowerSGDMethods.__dict__.items() if not k.startswith("__")}
    attrs["_low_rank_config"] = config
    return attrs
