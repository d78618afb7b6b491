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
from typing import Iterable, List, Optional, Tuple, Union

import torch

from pyhorovod import _api, basics
from pyhorovod.process_sets import ProcessSet, global_process_set
from pyhorovod.torch import _convert as cv
from pyhorovod.torch._optimizer_base import _DistributedOptimizer
from pyhorovod.torch.compression import Compression
from pyhorovod.torch.powersgd import PowerSGD


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
