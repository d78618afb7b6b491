"""The class behind DistributedOptimizer (pyhorovod/torch/optimizer.py): the gradient hooks, their
allreduces, synchronize()/step(), and the registry of optimizers whose LR follows the job's size.

Its own module so that the variants derived from it (adasum_optimizer.py, powersgd_optimizer.py) import it
without importing the factory that picks them: no import cycle.
"""
import warnings
import weakref
from contextlib import contextmanager

import torch

from pyhorovod import _api, _autotune, basics
from pyhorovod.elastic import _membership
from pyhorovod.process_sets import global_process_set
from pyhorovod.torch import _convert as cv
from pyhorovod.torch import ops
from pyhorovod.torch.sparse import sparse_allreduce_async
from pyhorovod.torch.functions import broadcast_object

STEP_AFTER_SYNCHRONIZE = ("step() after synchronize() waits for the gradients a second time; wrap step() in "
                          "`with optimizer.skip_synchronize():` when you call synchronize() yourself")


def _split_list(items, n):
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


class _DistributedOptimizer(torch.optim.Optimizer):
    # The methods are copied into a subclass of the wrapped optimizer's class (see DistributedOptimizer),
    # hence super(self.__class__, self) instead of super().
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense, process_set, extras):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        named_parameters = cv.checked_named_parameters(self.param_groups, named_parameters)
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._handles = {}
        self._hook_handles = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._groups = groups
        self._p_to_group = {}
        self._reduced_apart = set()   # parameters a compression reduces by itself (kept out of groups)
        self._group_counts = {}
        self._lr_policy = extras.get("lr_policy")
        self._noise_tap = extras.get("noise_tap")
        self._lr_step = 0
        self._applied_lrs = None
        # An elastic job may grow from one worker: its gradients must be reduced from then on.
        if process_set.included() and (basics.size() > 1 or self._noise_tap is not None
                                       or _membership.is_elastic()):
            self._register_hooks()
        if hasattr(self._lr_policy, "rescale") and process_set is global_process_set:
            _follow_job_size.add(self)

    # ------------------------------------------------------------ hooks

    def _register_hooks(self):
        if self._groups is not None:
            p_list = [p for group in self.param_groups for p in group["params"]
                      if p.requires_grad and p not in self._reduced_apart]
            # Groups must be formed identically everywhere: use the set's first rank's parameter order
            # (root_rank is a global rank, so on a process set without rank 0 it is not 0).
            order = broadcast_object([self._parameter_names.get(p) for p in p_list],
                                     root_rank=self.process_set.ranks[0],
                                     name="DistributedOptimizer.groups", process_set=self.process_set)
            p_list.sort(key=lambda p: order.index(self._parameter_names.get(p)))
            if isinstance(self._groups, list):
                listed = {id(p) for p in p_list}
                p_groups = [[p for p in g if id(p) in listed] for g in self._groups]
                grouped = {id(p) for g in p_groups for p in g}
                p_groups += [[p] for p in p_list if id(p) not in grouped]
            else:
                p_groups = _split_list(p_list, self._groups)
            for group in (tuple(g) for g in p_groups if g):
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    self._hook_handles.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))
        if self._noise_tap is not None:
            self._noise_tap.params_per_step = len(self._requires_update)

    def _scales(self):
        # Average = Sum x 1/size (added by the engine); predividing splits the division around the sum
        # (less overflow risk in fp16): pre 1/f, post f.
        if self.op == _api.Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # This rank computed no gradient for p (a dynamic graph), but others may have: send zeros.
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        name = self._parameter_names.get(p)
        tensor = p.grad
        tap = self._noise_tap
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                if tap is not None:
                    tap.engine_slots(tensor, p)   # sparse: the tap takes the norms itself
                return sparse_allreduce_async(tensor, name=name, op=self.op, process_set=self.process_set), None
            tensor = tensor.to_dense()
        compressed, ctx = self._compression.compress(tensor)
        pre, post = self._scales()
        if tap is None:
            handle = ops.allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                          postscale_factor=post, process_set=self.process_set)
        else:   # the engine takes |g|^2 and the reduced |G|^2; the last gradient brings the tap's request
            slots = tap.engine_slots(p.grad, p, compressed is tensor)
            handle = ops.allreduce_tapped_async_([compressed], [slots], False, name, self.op, pre, post,
                                                 self.process_set, tap.attach_send())
        return handle, ctx

    def _grouped_allreduce_grad_async(self, group):
        tap = self._noise_tap
        for p in group:
            if p.grad is None:
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        grads = [p.grad.to_dense() if p.grad.is_sparse else p.grad for p in group]
        compressed, ctxs = zip(*[self._compression.compress(g) for g in grads])
        pre, post = self._scales()
        # The noise tap's squared-norm addresses per tensor (None: the tap took the norm itself).
        slots = [None if tap is None else tap.engine_slots(p.grad, p, c is p.grad)
                 for p, c in zip(group, compressed)]
        handle = ops.allreduce_tapped_async_(list(compressed), slots, True, self._parameter_names.get(group[0]),
                                             self.op, pre, post, self.process_set,
                                             () if tap is None else tap.attach_send())
        return handle, ctxs

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        f"backward() ran more than backward_passes_per_step={self.backward_passes_per_step} "
                        f"time(s) before step(); call step() after that many passes, or raise "
                        f"backward_passes_per_step to accumulate more passes locally")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            if self._noise_tap is not None and self._noise_tap.micro:
                self._noise_tap.on_pass(p)  # one worker: per-micro-batch norms (noise_tap.py)
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if p in self._p_to_group:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._handles[group] = self._grouped_allreduce_grad_async(group)
                        for gp in group:
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        self._maybe_start_noise_tap()
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
            if handle is not None:
                self._maybe_start_noise_tap()
        return hook

    def _started(self):
        done = set()
        for key, (handle, _) in self._handles.items():
            if handle is not None:
                done.update(key if isinstance(key, tuple) else (key,))
        return done

    def _maybe_start_noise_tap(self):
        # The extra norm rides with the step's last gradient, in the same engine cycle.
        tap = self._noise_tap
        if tap is None or tap.started:
            return
        if self._groups is None and len(self._handles) < len(self._requires_update):
            return   # some parameter has no entry yet: skip building the set (this runs in every hook)
        if len(self._started()) == len(self._requires_update):
            tap.start()

    # ------------------------------------------------------------ synchronize / step

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those whose hooks did not fire) and writes the
        averaged gradients into p.grad."""
        if not self.process_set.included():
            self._synchronized = True
            return
        pending = self._requires_update - self._started()
        for group in {self._p_to_group[p] for p in pending if p in self._p_to_group}:
            for gp in group:
                self._handles.pop(gp, None)
            self._handles[group] = self._grouped_allreduce_grad_async(group)
            self._group_counts[group] = 0
        for p in pending - set(self._p_to_group):
            self._handles[p] = self._allreduce_grad_async(p)
        if self._noise_tap is not None and self._requires_update:
            self._noise_tap.start()
        reduced, reduced_params = [], []
        try:
            for key, (handle, ctx) in list(self._handles.items()):
                if isinstance(key, tuple):
                    outputs = ops.synchronize(handle)
                    for gp, output, gctx in zip(key, outputs, ctx):
                        self._allreduce_delay[gp] = self.backward_passes_per_step
                        self._set_grad(gp, self._compression.decompress(output, gctx))
                        reduced.append(gp.grad)
                        reduced_params.append(gp)
                else:
                    output = handle() if callable(handle) else ops.synchronize(handle)
                    self._allreduce_delay[key] = self.backward_passes_per_step
                    self._set_grad(key, output if callable(handle) else self._compression.decompress(output, ctx))
                    reduced.append(key.grad)
                    reduced_params.append(key)
        except BaseException:
            self._abandon_step()
            raise
        self._handles.clear()
        self._synchronized = True
        if self._noise_tap is not None and self._requires_update:
            self._noise_tap.finish(reduced, self._lrs_for_step()[0], reduced_params)

    def _abandon_step(self):
        """After a failed synchronize (step() re-raises, so no update uses partly reduced gradients): wait
        out the other in-flight allreduces (they write into p.grad) and forget them, so training can go on."""
        for handle, _ in list(self._handles.values()):
            if handle is not None and not callable(handle):
                try:
                    ops.synchronize(handle)
                except Exception:  # noqa: BLE001 -- failed or already synchronized: either way it is done
                    pass
        self._handles.clear()
        if self._noise_tap is not None:
            self._noise_tap.abandon()
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for group in self._group_counts:
            self._group_counts[group] = 0
        self._synchronized = False

    @staticmethod
    def _set_grad(p, value):
        if p.grad.is_sparse:
            if not value.is_sparse:  # sparse_as_dense: back to the layout the optimizer expects
                value = value.to_sparse()
            p.grad.zero_().add_(value)
        elif value.data_ptr() != p.grad.data_ptr():
            p.grad.set_(value.to(p.grad.dtype) if value.dtype != p.grad.dtype else value)

    @contextmanager
    def skip_synchronize(self):
        """For step() after an explicit synchronize() (e.g. gradient clipping between the two)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def _lrs_for_step(self):
        lrs = [group["lr"] for group in self.param_groups]
        if self._lr_policy is None:
            return lrs
        m = self._lr_policy.multiplier(self._lr_step)
        return [lr * m for lr in lrs]

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(STEP_AFTER_SYNCHRONIZE)
            self.synchronize()
        self._synchronized = False
        _autotune.on_step()
        if self._lr_policy is None:
            return super(self.__class__, self).step(closure)
        base = [group["lr"] for group in self.param_groups]
        applied = self._lrs_for_step()
        for group, lr in zip(self.param_groups, applied):
            group["lr"] = lr
        try:
            return super(self.__class__, self).step(closure)
        finally:
            for group, lr in zip(self.param_groups, base):
                group["lr"] = lr
            self._applied_lrs = applied
            if basics.rank() == 0:
                self._lr_policy.maybe_log(self._lr_step, applied)
            self._lr_step += 1

    def _local_step(self, closure=None):
        """The wrapped optimizer's step alone: no allreduce, no LR scaling (broadcast_optimizer_state)."""
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none: bool = True):
        if self._handles:
            raise AssertionError("zero_grad() while the gradients of the last backward() are still being "
                                 "allreduced would clear them under the allreduce; call step() (or "
                                 "synchronize()) between backward() and zero_grad()")
        return super(self.__class__, self).zero_grad(set_to_none)

    # ------------------------------------------------------------ state, extras

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def applied_lr(self):
        """The LRs (one per param group) used by the last step(), after scaling and warmup."""
        return list(self._applied_lrs) if self._applied_lrs is not None else self._lrs_for_step()

    @property
    def lr_step(self):
        """Steps taken so far, as counted by the warmup (restored by load_state_dict)."""
        return self._lr_step

    def state_dict(self):
        state = super(self.__class__, self).state_dict()
        state["pyhorovod_lr_step"] = self._lr_step
        return state

    def load_state_dict(self, state_dict):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        state_dict = dict(state_dict)
        self._lr_step = int(state_dict.pop("pyhorovod_lr_step", self._lr_step))
        super(self.__class__, self).load_state_dict(state_dict)

    def noise_scale_report(self):
        """The noise-scale estimator's report() (measure_noise_scale=True), None before the first step."""
        if self._noise_tap is None:
            raise ValueError("noise_scale_report() needs DistributedOptimizer(measure_noise_scale=True, "
                             "batch_size=...)")
        return self._noise_tap.report()

    @property
    def noise_scale_estimator(self):
        """The NoiseScaleEstimator itself (e.g. to set .grad_scale under AMP), None when not measuring."""
        return None if self._noise_tap is None else self._noise_tap.estimator


# Optimizers whose lr_scaling follows the number of workers: after every init (an elastic reset may
# change the size) their policy is rescaled. Weak, so that the registry keeps no optimizer alive.
_follow_job_size: "weakref.WeakSet[_DistributedOptimizer]" = weakref.WeakSet()


def _rescale_lr_policies():
    for optimizer in list(_follow_job_size):
        optimizer._lr_policy.rescale(basics.size())


basics.on_init(_rescale_lr_policies)
