"""DistributedOptimizer: horovod.torch's optimizer wrapper that averages gradients across ranks.

A hook on each parameter's gradient accumulator starts that gradient's allreduce as soon as backward has
accumulated it (after backward_passes_per_step passes), so communication overlaps the rest of backward;
step() (or synchronize()) waits for all of them, then the wrapped optimizer updates. As in Horovod the
result is an instance of a subclass of the wrapped optimizer's class, built on its param_groups.

Beyond Horovod (all off by default, so Horovod scripts behave the same):
- lr_scaling="linear"|"sqrt" with base_batch_size=, batch_size=, warmup_steps=/warmup_epochs=
  (+ steps_per_epoch=): the optimizer applies the scaled, warmed-up LR itself (pyhorovod/torch/_lr_policy.py);
- measure_noise_scale=True (or "per_group") with batch_size=: the gradient noise scale
  (pyhorovod/torch/noise_tap.py), read with noise_scale_report(); lr_scaling="adascale" on top of it
  multiplies the LR by the AdaScale gain (pyhorovod/scaling/adascale.py).
"""
import warnings
import weakref
from contextlib import contextmanager
from typing import Iterable, List, Optional, Tuple, Union

import torch

from pyhorovod import _api, _autotune, basics
from pyhorovod.elastic import _membership
from pyhorovod.process_sets import ProcessSet, global_process_set
from pyhorovod.torch import _convert as cv
from pyhorovod.torch import ops
from pyhorovod.torch.compression import Compression
from pyhorovod.torch.functions import broadcast_object
from pyhorovod.torch.powersgd import PowerSGD


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
                return ops.sparse_allreduce_async(tensor, name=name, op=self.op, process_set=self.process_set), None
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


def DistributedOptimizer(optimizer: torch.optim.Optimizer,
                         named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
                         compression: type = Compression.none, backward_passes_per_step: int = 1,
                         op: int = _api.Average, gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                         groups: Union[None, int, List[List[torch.Tensor]]] = None, sparse_as_dense: bool = False,
                         process_set: ProcessSet = global_process_set, lr_scaling: Optional[str] = None,
                         base_batch_size: Optional[int] = None, batch_size: Optional[int] = None,
                         warmup_steps: Optional[int] = None, warmup_epochs: Optional[float] = None,
                         steps_per_epoch: Optional[int] = None,
                         measure_noise_scale: Union[bool, str] = False) -> torch.optim.Optimizer:
    """Wraps a torch optimizer so that each ``step()`` uses gradients averaged over the ranks.

    While ``backward()`` runs, a hook on every parameter starts that gradient's allreduce as soon as it
    has been accumulated, so communication overlaps the rest of the backward pass. ``step()`` waits for
    them all, writes the reduced gradients into ``p.grad`` and runs the wrapped optimizer's update. As
    with Horovod, the result is an instance of a subclass of the optimizer's own class, sharing its
    ``param_groups``; it adds these methods:

    - ``synchronize()``: wait for the allreduces now (e.g. to clip gradients before the update), then
      call ``step()`` inside ``with optimizer.skip_synchronize():``.
    - ``set_backward_passes_per_step(n)``.
    - ``applied_lr()``: the LR of each param group that the last step used (after ``lr_scaling``), and
      the ``lr_step`` property: the steps counted by the warmup (kept in ``state_dict()``).
    - ``noise_scale_report()`` and the ``noise_scale_estimator`` property (``measure_noise_scale``).

    ``zero_grad()`` between ``backward()`` and ``step()`` raises AssertionError, as with Horovod, because
    allreduces may still be writing the gradients. A failed step (HorovodInternalError from a peer)
    leaves the parameters untouched.

    Args:
        optimizer: the torch optimizer to wrap.
        named_parameters: ``model.named_parameters()``: names the allreduce requests (recommended: the
            same on every rank). Without it, names are made from the parameters' positions.
        compression: :attr:`Compression.none` (default), :attr:`Compression.fp16` or ``.bf16``
            (floating-point gradients travel as 16-bit floats), or a :class:`PowerSGD` object: low-rank
            compression of the matrix-shaped gradients (pyhorovod/torch/powersgd.py); its state is kept
            in ``state_dict()``.
        backward_passes_per_step: local backward passes accumulated before each allreduce.
        op: :data:`Average` (default), :data:`Sum`, or :data:`Adasum`: then each rank runs the wrapped
            optimizer's step on its own gradients and the parameter changes are combined with Adasum
            (CPU tensors only; the allreduce runs in ``step()``, after backward).
        gradient_predivide_factor: with Average, divide the gradients by this before the sum and by
            size / factor after it (less overflow in float16); other ops refuse a factor other than 1.
        num_groups: deprecated spelling of an integer ``groups`` (DeprecationWarning).
        groups: reduce parameters together as one unit: an integer n (the parameters split into n groups
            in order) or a list of lists of parameters (the rest go one by one).
        sparse_as_dense: send sparse gradients as dense tensors instead of by allgather.
        process_set: the ranks that average their gradients (default: all); ranks outside it take local
            steps.
        lr_scaling: pyhorovod's addition, off by default. ``"linear"`` or ``"sqrt"``: during each step the
            optimizer multiplies every param group's LR by the rule's factor k or sqrt(k), k = global
            batch / ``base_batch_size``, reached by linear warmup from the unscaled LR; the group's LR
            is restored after the step, so an LR scheduler keeps working on the unscaled LR and a
            script that scales the LR itself is not scaled twice. Rank 0 logs the applied LR at the
            first step, at each quarter of the warmup and when the target is reached. When the job's
            size changes (an elastic reset), k follows the new global batch, with one log line; the
            warmup goes on where it was. ``"adascale"``
            (needs ``measure_noise_scale``) multiplies the LR by the AdaScale gain computed from the
            noise-scale estimates.
        base_batch_size: the global batch the LR was tuned for. Without it, the LR is taken to be tuned
            for one rank's batch, so k = ranks x ``backward_passes_per_step``.
        batch_size: the local batch of one backward pass on one rank; needed with
            ``base_batch_size`` and with ``measure_noise_scale``. The global batch is
            batch_size x backward_passes_per_step x ranks of the set.
        warmup_steps: optimizer steps of the warmup (default 0: the scaled LR from the first step).
        warmup_epochs: the warmup in epochs (may be fractional), with ``steps_per_epoch``.
        steps_per_epoch: optimizer steps in one epoch.
        measure_noise_scale: pyhorovod's addition, off by default. True: measure the gradient noise
            scale B_simple = tr(Sigma) / abs(G)^2 during training, from each rank's squared gradient
            norm before the allreduce and the squared norm of the averaged gradient after it (one extra
            float per step, in the same fused allreduce). ``"per_group"`` also measures each param
            group. Read the result with ``noise_scale_report()``: a dict with ``b_simple``,
            ``grad_sq``, ``trace_sigma``, ``b_small``, ``b_big``, ``step`` and, once step times are
            known, the advisor's critical-batch estimate and recommended batch (None before the first
            step). Rank 0 prints a summary every ``PYHOROVOD_NOISE_SCALE_LOG_EVERY`` measured steps.

    Returns:
        The wrapped optimizer (an instance of a subclass of ``type(optimizer)``).

    Raises:
        ValueError: ``named_parameters`` that are not (name, tensor) pairs, repeat a name or leave out
            a parameter of the optimizer; an unsupported op (with PowerSGD: other than Average or Sum), a
            predivide factor with an op other than Average, malformed
            ``groups``, ``backward_passes_per_step`` below 1, an unregistered process set, ``lr_scaling``
            options that do not fit together (warmup or base batch without a rule, base batch without
            ``batch_size``, ``"adascale"`` without ``measure_noise_scale``), or ``lr_scaling`` /
            ``measure_noise_scale`` with op=Adasum.
    """
    from pyhorovod.torch._lr_policy import LrPolicy
    from pyhorovod.torch.noise_tap import NoiseScaleTap

    (compression.check_op if isinstance(compression, PowerSGD) else cv.check_op)(op)
    if gradient_predivide_factor != 1.0 and op != _api.Average:
        raise ValueError(f"gradient_predivide_factor={gradient_predivide_factor!r} needs op=Average (it splits the "
                         f"averaging into a division before and after the sum)")
    if num_groups != 0:
        warnings.warn("DistributedOptimizer(num_groups=N) is the old spelling of groups=N; pass groups= instead "
                      "(num_groups will go in a later release)", DeprecationWarning)
        if groups is None:
            groups = num_groups
    cv.check_groups(groups)
    if backward_passes_per_step <= 0:
        raise ValueError(f"backward_passes_per_step={backward_passes_per_step!r}: expected a positive integer")
    process_set = global_process_set if process_set is None else process_set
    if getattr(process_set, "process_set_id", None) is None:
        raise ValueError(f"process_set={process_set!r} is not a registered ProcessSet")
    if op == _api.Adasum:
        if lr_scaling not in (None, "none") or measure_noise_scale:
            raise ValueError("op=Adasum reduces parameter changes, not gradients: lr_scaling= and "
                             "measure_noise_scale= do not apply to it")
        from pyhorovod.torch.adasum_optimizer import DistributedAdasumOptimizer
        return DistributedAdasumOptimizer(optimizer, named_parameters, compression, backward_passes_per_step,
                                          process_set)
    workers = len(process_set.ranks)
    extras = {}
    if lr_scaling == "adascale":
        if not measure_noise_scale:
            raise ValueError("lr_scaling='adascale' needs measure_noise_scale=True (its gain comes from the "
                             "noise-scale estimates)")
    elif lr_scaling not in (None, "none"):
        extras["lr_policy"] = LrPolicy(lr_scaling, workers, backward_passes_per_step, base_batch_size,
                                       batch_size, warmup_steps, warmup_epochs, steps_per_epoch)
    elif base_batch_size is not None or warmup_steps is not None or warmup_epochs is not None:
        raise ValueError("base_batch_size/warmup_steps/warmup_epochs need lr_scaling='linear' or 'sqrt'")
    if measure_noise_scale:
        if measure_noise_scale not in (True, "per_group"):
            raise ValueError("measure_noise_scale must be False, True or 'per_group', got %r"
                             % (measure_noise_scale,))
        extras["noise_tap"] = NoiseScaleTap(batch_size, backward_passes_per_step, workers, op, process_set,
                                            optimizer.param_groups, per_group=measure_noise_scale == "per_group")
        if lr_scaling == "adascale":
            from pyhorovod.scaling.adascale import AdaScalePolicy
            extras["lr_policy"] = AdaScalePolicy(extras["noise_tap"].estimator, verbose=basics.rank() == 0)

    attrs = {k: v for k, v in _DistributedOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")}
    if isinstance(compression, PowerSGD):
        from pyhorovod.torch.powersgd_optimizer import powersgd_attrs
        if measure_noise_scale:
            raise ValueError("measure_noise_scale= needs each gradient's own allreduce: not with PowerSGD")
        attrs.update(powersgd_attrs(compression))
        compression = Compression.none   # for the tensors PowerSGD leaves uncompressed
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), attrs)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set, extras)
