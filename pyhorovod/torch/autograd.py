"""The differentiable out-of-place collectives of horovod.torch, with Horovod's backward passes.

Every rank k computes its own loss L_k from the collective's output and backpropagates with output
gradient g_k. Call the "exact" gradient the derivative of the sum over ranks of L_k with respect to this
rank's input. Horovod's backward passes are not all the exact one; they are kept for drop-in parity (a
script ported from Horovod trains with the same gradients, e.g. the same effective learning rate):
- allreduce y = post * op_k(pre * x_k): Sum/Average pass the same allreduce of the g_k (exact). Min/Max
  (which Horovod passes through, giving a wrong gradient) route the summed gradient to the ranks whose
  input equals the result.
- allgather: this rank's rows of the *averaged* g_k (Horovod's choice: the exact gradient / n).
- broadcast: the averaged g_k on the root rank, zeros elsewhere (Horovod's choice: exact / n).
- alltoall: the output gradient sent back along the received splits (exact).
- reducescatter: Horovod's choice is n * exact, see _scatter_backward.
"""
from typing import List, Optional, Sequence, Tuple, Union

import torch

from pyhorovod import _api, _core
from pyhorovod.process_sets import ProcessSet, global_process_set
from pyhorovod.torch import _convert as cv
from pyhorovod.torch import _prepared, ops
from pyhorovod.torch.compression import Compression


def _backward_allreduce(grad, op, prescale, postscale, ps, x=None, y=None):
    # Adasum: the gradient is Adasum-combined too, as Horovod's backward does (it reuses the forward op).
    if op in (_api.Sum, _api.Average, _api.Adasum):
        return ops.synchronize(ops.allreduce_async(grad.contiguous(), op=op, prescale_factor=prescale,
                                                   postscale_factor=postscale, process_set=ps))
    if op in (_api.Min, _api.Max):
        summed = ops.synchronize(ops.allreduce_async(grad.contiguous(), op=_api.Sum, process_set=ps))
        return summed * (x * prescale * postscale == y).to(summed.dtype) * (prescale * postscale)
    raise NotImplementedError("allreduce with op=Product has no backward pass in pyhorovod (nor a correct "
                              "one in Horovod)")


class HorovodAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, ps):
        ctx.op, ctx.prescale, ctx.postscale, ctx.ps = op, prescale, postscale, ps
        out = ops._allreduce_async([tensor], False, False, None, name, op, prescale, postscale, ps,
                                   run=_api.submit_sync)
        if op in (_api.Min, _api.Max):
            ctx.save_for_backward(tensor, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors if ctx.op in (_api.Min, _api.Max) else (None, None)
        return _backward_allreduce(grad, ctx.op, ctx.prescale, ctx.postscale, ctx.ps, x, y), \
            None, None, None, None, None


class HorovodGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, ps, *tensors):
        ctx.op, ctx.prescale, ctx.postscale, ctx.ps = op, prescale, postscale, ps
        outs = ops.synchronize(ops.grouped_allreduce_async(list(tensors), name=name, op=op,
                                                           prescale_factor=prescale, postscale_factor=postscale,
                                                           process_set=ps))
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        if ctx.op not in (_api.Sum, _api.Average):
            raise NotImplementedError("grouped_allreduce has a backward pass only for op=Sum/Average")
        outs = ops.synchronize(ops.grouped_allreduce_async([g.contiguous() for g in grads], op=ctx.op,
                                                           prescale_factor=ctx.prescale,
                                                           postscale_factor=ctx.postscale, process_set=ctx.ps))
        return (None, None, None, None, None) + tuple(outs)


def allreduce(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
              compression: type = Compression.none, op: Optional[int] = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Reduces ``tensor`` over the ranks of the process set, into a new tensor. Differentiable.

    Every rank of the set passes a tensor of the same shape and dtype and gets the same result. The
    backward pass allreduces the output gradient with the same op and scale factors (Sum, Average); for
    Min and Max the summed gradient goes to the ranks whose input equals the result, where Horovod
    passes the gradient through unchanged.

    Args:
        tensor: a CPU tensor, or a CUDA tensor when the GPU backend is built.
        average: deprecated spelling of ``op`` (DeprecationWarning); give one or the other.
        name: the request's name, the same on every rank (automatic when None).
        compression: applied around the transfer, e.g. :attr:`Compression.fp16`.
        op: :data:`Sum`, :data:`Average` (the default), :data:`Min`, :data:`Max`, :data:`Product`, or
            :data:`Adasum` (CPU float tensors only: ValueError on CUDA tensors).
        prescale_factor: multiplies each rank's input before the reduction.
        postscale_factor: multiplies the result. Both must be whole numbers on integer tensors.
        process_set: the ranks that take part (default: all).

    Returns:
        A new tensor holding the reduction. On integer tensors Average truncates toward zero.

    Raises:
        ValueError: a bad argument, raised on this rank before anything is sent.
        HorovodTimeoutError: not every rank of the set submitted the request in time.
        HorovodInternalError: the collective failed (a peer died, a connection broke).
    """
    key = None
    if compression is Compression.none and average is None and process_set is global_process_set:
        key = _prepared.allreduce_key(tensor, name, op, prescale_factor, postscale_factor, False)
        out = _prepared.run(key, tensor)
        if out is not None:
            return out
    op = cv.resolve_op(op, average)
    compressed, ctx = compression.compress(tensor)
    out = HorovodAllreduce.apply(compressed, name, op, float(prescale_factor), float(postscale_factor),
                                 process_set)
    if key is not None:
        _prepared.file(key, tensor, reduce_op=op, prescale=prescale_factor, postscale=postscale_factor)
    return compression.decompress(out, ctx)


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: Optional[bool] = None, name: Optional[str] = None,
                      compression: type = Compression.none, op: Optional[int] = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """Reduces a list of tensors as one unit (one negotiation, fused, completed together).

    Takes the arguments of :func:`allreduce`, applied to every tensor. Differentiable for Sum and
    Average.

    Returns:
        A list of new tensors, one per input, in order.
    """
    op = cv.resolve_op(op, average)
    pairs = [compression.compress(t) for t in tensors]
    outs = HorovodGroupedAllreduce.apply(name, op, float(prescale_factor), float(postscale_factor),
                                         process_set, *[p[0] for p in pairs])
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]


def _gather_backward(grad, rows, ps):
    """This rank's block (`rows` rows of dim 0) of the output gradient averaged over the set, as Horovod
    (the sum would be the exact gradient; Horovod divides it by the set size)."""
    averaged = ops.synchronize(ops.allreduce_async(grad.contiguous(), op=_api.Average, process_set=ps))
    sizes = ops.synchronize(ops.allgather_async(torch.tensor([rows], dtype=torch.int64), process_set=ps))
    offset = int(sizes[:cv.set_rank(cv.process_set(ps))].sum())
    return averaged.narrow(0, offset, rows)


class HorovodAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, ps):
        ctx.rows, ctx.ps = int(tensor.shape[0]) if tensor.dim() else 0, ps
        return ops._allgather_async([tensor], False, name, ps, run=_api.submit_sync)

    @staticmethod
    def backward(ctx, grad):
        return _gather_backward(grad, ctx.rows, ctx.ps), None, None


class HorovodGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, ps, *tensors):
        ctx.rows, ctx.ps = [int(t.shape[0]) if t.dim() else 0 for t in tensors], ps
        return tuple(ops.synchronize(ops.grouped_allgather_async(list(tensors), name=name, process_set=ps)))

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(_gather_backward(g, r, ctx.ps) for g, r in zip(grads, ctx.rows))


def allgather(tensor: torch.Tensor, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Concatenates every rank's tensor along dimension 0, in rank order. Differentiable.

    The first dimensions may differ between ranks; the others and the dtype must agree. The backward
    pass gives each rank its rows of the output gradient averaged over the set (Horovod's choice: the
    exact gradient of the sum of the ranks' losses divided by the set size).

    Args:
        tensor: a tensor with at least one dimension.
        name: the request's name, the same on every rank (automatic when None).
        process_set: the ranks that take part (default: all).

    Returns:
        A new tensor whose first dimension is the sum of the ranks' first dimensions.

    Raises:
        ValueError: a bad argument, raised on this rank before anything is sent.
        HorovodTimeoutError: not every rank of the set submitted the request in time.
        HorovodInternalError: the collective failed (a peer died, a connection broke).
    """
    key = _prepared.exchange_key(tensor, _core.ALLGATHER, name) if process_set is global_process_set else None
    out = _prepared.run(key, tensor)
    if out is None:
        out = HorovodAllgather.apply(tensor, name, process_set)
        _prepared.file(key, tensor)
    return out


def grouped_allgather(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                      process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """:func:`allgather` of each tensor of a list, as one unit; returns the list of results. Differentiable."""
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


class HorovodBroadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, ps):
        ctx.root_rank, ctx.ps = root_rank, ps
        return ops._broadcast_async(tensor, root_rank, name, ps, False, run=_api.submit_sync)

    @staticmethod
    def backward(ctx, grad):
        reduced = ops.synchronize(ops.allreduce_async(grad.contiguous(), op=_api.Average, process_set=ctx.ps))
        from pyhorovod import basics
        if basics.rank() != ctx.root_rank:
            reduced.zero_()
        return reduced, None, None, None


def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Copies the root rank's tensor to every rank of the set, into a new tensor. Differentiable.

    The backward pass gives the root the output gradient averaged over the set and the other ranks
    zeros, as Horovod does.

    Args:
        tensor: on the root, the data; elsewhere a tensor of the same shape and dtype.
        root_rank: the sending rank, a global rank (also on a process set, as in Horovod).
        name: the request's name, the same on every rank (automatic when None).
        process_set: the ranks that take part (default: all).

    Returns:
        A new tensor holding the root's values.

    Raises:
        ValueError: a bad argument, raised on this rank before anything is sent.
        HorovodTimeoutError: not every rank of the set submitted the request in time.
        HorovodInternalError: the collective failed (a peer died, a connection broke).
    """
    key = _prepared.broadcast_key(tensor, root_rank, name, False) if process_set is global_process_set else None
    out = _prepared.run(key, tensor)
    if out is not None:
        return out
    out = HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    _prepared.file(key, tensor, root=root_rank)
    return out


class HorovodAlltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, ps):
        out, received = ops._alltoall_async(tensor, splits, name, ps, run=_api.submit_sync)
        ctx.received, ctx.ps = received, ps
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        back, _ = ops.synchronize(ops.alltoall_async(grad.contiguous(), splits=ctx.received,
                                                     process_set=ctx.ps))
        return back, None, None, None


def alltoall(tensor: torch.Tensor, splits: Union[None, Sequence[int], torch.Tensor] = None, name: Optional[str] = None,
             process_set: ProcessSet = global_process_set) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Sends a slice of dimension 0 to each rank of the set and receives one from each. Differentiable.

    The backward pass sends the output gradient back along the received splits.

    Args:
        tensor: a tensor with at least one dimension.
        splits: rows per destination set rank (a list or an integer tensor adding up to dimension 0);
            None: equal parts, which needs dimension 0 divisible by the set's size.
        name: the request's name, the same on every rank (automatic when None).
        process_set: the ranks that take part (default: all).

    Returns:
        The rows every rank sent here, concatenated in rank order; with ``splits`` given, the tuple
        ``(output, received_splits)``, received_splits an int32 tensor of the rows from each rank.

    Raises:
        ValueError: a bad argument, raised on this rank before anything is sent.
        HorovodTimeoutError: not every rank of the set submitted the request in time.
        HorovodInternalError: the collective failed (a peer died, a connection broke).
    """
    key = None
    if splits is None and process_set is global_process_set:
        key = _prepared.exchange_key(tensor, _core.ALLTOALL, name)
        out = _prepared.run(key, tensor)
        if out is not None:
            return out
    elif process_set is global_process_set:
        both = _prepared.alltoall_with_splits(tensor, splits, name)
        if both is not None:
            return both
    out, received = HorovodAlltoall.apply(tensor, splits, name, process_set)
    _prepared.file(key, tensor)
    return out if splits is None else (out, received)


def _scatter_backward(grad, op, prescale, postscale, ps):
    """Horovod's reducescatter backward: allgather(g) * s * n for Sum and allgather(g) * s for Average,
    s = prescale * postscale, n = set size.

    Derivation. Forward: rank r keeps block r of y = s * sum_k x_k (Sum) or of s * (1/n) sum_k x_k
    (Average). Input x_k's block r reaches only rank r's output, so d(sum_r L_r)/dx_k[block r] =
    s * g_r (Sum) or s * g_r / n (Average): the exact gradient is the allgather of the g_r, scaled.
    Horovod multiplies that by n (Sum: s * n * g_r; Average: s * g_r, no division), and so do we."""
    if op not in (_api.Sum, _api.Average):
        raise NotImplementedError("reducescatter has a backward pass only for op=Sum/Average")
    gathered = ops.synchronize(ops.allgather_async(grad.contiguous(), process_set=ps))
    scale = prescale * postscale
    if op == _api.Sum:
        scale *= cv.set_size(cv.process_set(ps))
    return gathered * scale if scale != 1.0 else gathered


class HorovodReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, ps, prescale, postscale):
        ctx.args = (op, prescale, postscale, ps)
        return ops._reducescatter_async([tensor], False, name, op, ps, prescale, postscale,
                                        run=_api.submit_sync)

    @staticmethod
    def backward(ctx, grad):
        return _scatter_backward(grad, *ctx.args), None, None, None, None, None


class HorovodGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, ps, prescale, postscale, *tensors):
        ctx.args = (op, prescale, postscale, ps)
        return tuple(ops.synchronize(ops.grouped_reducescatter_async(
            list(tensors), name=name, op=op, process_set=ps, prescale_factor=prescale,
            postscale_factor=postscale)))

    @staticmethod
    def backward(ctx, *grads):
        return (None,) * 5 + tuple(_scatter_backward(g, *ctx.args) for g in grads)


def reducescatter(tensor: torch.Tensor, name: Optional[str] = None, compression: type = Compression.none,
                  op: int = _api.Average, process_set: ProcessSet = global_process_set,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` over the set and returns this rank's block of dimension 0. Differentiable.

    Set rank r gets ``dim0 // n`` rows, one more for the first ``dim0 % n`` ranks (n the set's size).
    The backward pass is Horovod's: the allgathered output gradient times the set size for Sum, and
    undivided for Average.

    Args:
        tensor: a tensor with at least one dimension, the same shape on every rank.
        name: the request's name, the same on every rank (automatic when None).
        compression: applied around the transfer, e.g. :attr:`Compression.fp16`.
        op: :data:`Sum`, :data:`Average` (the default), :data:`Min`, :data:`Max` or :data:`Product`.
        process_set: the ranks that take part (default: all).
        prescale_factor: multiplies each rank's input before the reduction.
        postscale_factor: multiplies the result.

    Returns:
        A new tensor: this rank's block of the reduction.

    Raises:
        ValueError: a bad argument, raised on this rank before anything is sent.
        HorovodTimeoutError: not every rank of the set submitted the request in time.
        HorovodInternalError: the collective failed (a peer died, a connection broke).
    """
    key = None
    if compression is Compression.none and process_set is global_process_set:
        key = _prepared.exchange_key(tensor, _core.REDUCESCATTER, name, op, prescale_factor, postscale_factor)
        out = _prepared.run(key, tensor)
        if out is not None:
            return out
    op_code = cv.check_op(_api.resolve_op(op, None))
    compressed, ctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(compressed, name, op_code, process_set, float(prescale_factor),
                                     float(postscale_factor))
    _prepared.file(key, tensor, reduce_op=op_code, prescale=prescale_factor, postscale=postscale_factor,
                   out_shape=tuple(out.shape))
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                          compression: type = Compression.none, op: int = _api.Average,
                          process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> List[torch.Tensor]:
    """:func:`reducescatter` of each tensor of a list, as one unit; returns the list of this rank's blocks."""
    op = cv.check_op(_api.resolve_op(op, None))
    pairs = [compression.compress(t) for t in tensors]
    outs = HorovodGroupedReducescatter.apply(name, op, process_set, float(prescale_factor),
                                             float(postscale_factor), *[p[0] for p in pairs])
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]
