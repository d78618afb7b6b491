"""Collectives on torch tensors, as horovod.torch.mpi_ops: the asynchronous forms (a handle for poll() and
synchronize()), the in-place forms, grouped forms, and barrier/join.

Semantics follow horovod.torch; what differs is said where it happens:
- op=Adasum works on CPU float tensors (allreduce and grouped allreduce); on CUDA tensors it raises
  ValueError (the NCCL path has no Adasum). average= is deprecated (DeprecationWarning) and excludes op=.
- broadcast's root_rank is a global rank, also with a process set (as Horovod, and as the numpy API).
- In-place ops on non-contiguous tensors reduce a contiguous copy and write it back on completion.
The differentiable out-of-place forms (allreduce, allgather, broadcast, alltoall, reducescatter and their
grouped forms) live in pyhorovod/torch/autograd.py.
"""
import torch

from pyhorovod import _api, _core
from pyhorovod._api import Op
from pyhorovod.process_sets import global_process_set
from pyhorovod.torch import _convert as cv

poll = _api.poll
synchronize = _api.synchronize


def _name(name, i=None):
    if not name:
        return ""
    return f"{name}.{i}" if i is not None else str(name)


def _writeback(pairs):
    """finalize step for in-place ops on non-contiguous tensors: copy the contiguous result back."""
    for dst, src in pairs:
        if dst.data_ptr() != src.data_ptr() or not dst.is_contiguous():
            dst.detach().copy_(src)


# ---------------------------------------------------------------- allreduce

def _allreduce_async(tensors, inplace, grouped, average, name, op, prescale_factor, postscale_factor,
                     process_set, sumsq=None, extra_ops=()):
    what = ("grouped_" if grouped else "") + "allreduce" + ("_" if inplace else "")
    ps = cv.process_set(process_set)
    op = cv.resolve_op(op, average)
    prescale, postscale = float(prescale_factor), float(postscale_factor)
    tensors = list(tensors)
    if grouped and not tensors:
        raise ValueError(f"{what}: needs at least one tensor")
    inputs, outputs, codes = [], [], []
    for t in tensors:
        code = cv.check_tensor(t, what)
        _api.check_reduce(op, code, prescale, postscale)
        src = cv.contiguous(t)
        inputs.append(src)
        outputs.append(src if inplace else torch.empty_like(src, memory_format=torch.contiguous_format))
        codes.append(code)
    group = _api.new_group_id() if grouped else 0
    ops = [Op(_core.ALLREDUCE, c, cv.shape_of(x), x.data_ptr(), o.data_ptr(),
              name=_name(name, i if grouped else None), reduce_op=op, prescale=prescale, postscale=postscale,
              process_set=ps.process_set_id, device=cv.device_of(x), stream=cv.stream_of(x), group=group,
              group_size=len(inputs) if grouped else 0,
              **({} if sumsq is None or sumsq[i] is None else {"sumsq_in": sumsq[i][0], "sumsq_out": sumsq[i][1]}))
           for i, (x, o, c) in enumerate(zip(inputs, outputs, codes))]
    results = tensors if inplace else outputs

    def finalize(_):
        if inplace:
            _writeback(zip(tensors, outputs))
        return list(results) if grouped else results[0]

    return _api.submit(ops + list(extra_ops), (tensors, inputs, outputs), finalize)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts a reduction of `tensor` over the ranks of the set into a new tensor; returns a handle."""
    return _allreduce_async([tensor], False, False, average, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """As allreduce_async, writing the result into `tensor`."""
    return _allreduce_async([tensor], True, False, average, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_tapped_async_(tensors, sumsq, grouped, name, op, prescale_factor, postscale_factor, process_set,
                            extra_ops=()):
    """In-place (grouped) allreduce for DistributedOptimizer with the noise-scale tap's squared-norm
    addresses: sumsq[i] = (sumsq_in, sumsq_out) or None per tensor (Request::sumsq_in in request.h).
    extra_ops (the tap's own request, already built) are enqueued right behind, under the same handle."""
    return _allreduce_async(tensors, True, grouped, None, name, op, prescale_factor, postscale_factor,
                            process_set, sumsq, extra_ops)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce (not differentiable, as in Horovod); returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                        process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """One handle for a list of tensors reduced as one unit; synchronize() returns a list."""
    return _allreduce_async(tensors, False, True, average, name, op, prescale_factor, postscale_factor,
                            process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _allreduce_async(tensors, True, True, average, name, op, prescale_factor, postscale_factor,
                            process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---------------------------------------------------------------- allgather

def _allgather_async(tensors, grouped, name, process_set):
    what = "grouped_allgather" if grouped else "allgather"
    ps = cv.process_set(process_set)
    tensors = list(tensors)
    if grouped and not tensors:
        raise ValueError(f"{what}: needs at least one tensor")
    inputs, ops = [], []
    for i, t in enumerate(tensors):
        code = cv.check_tensor(t, what)
        cv.at_least_1d(t, what)
        x = cv.contiguous(t)
        inputs.append(x)
        ops.append(Op(_core.ALLGATHER, code, cv.shape_of(x), x.data_ptr(), 0,
                      name=_name(name, i if grouped else None), process_set=ps.process_set_id,
                      device=cv.device_of(x), stream=cv.stream_of(x)))

    def finalize(rs):
        outs = [cv.from_result(r, t.dtype, t.device) for r, t in zip(rs, tensors)]
        return outs if grouped else outs[0]

    return _api.submit(ops, inputs, finalize)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts the concatenation along dimension 0 of every rank's tensor (dim 0 may differ per rank)."""
    return _allgather_async([tensor], False, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    return _allgather_async(tensors, True, name, process_set)


# ---------------------------------------------------------------- broadcast

def _broadcast_async(tensor, root_rank, name, process_set, inplace):
    what = "broadcast_" if inplace else "broadcast"
    ps = cv.process_set(process_set)
    root = cv.set_root(root_rank, ps)
    code = cv.check_tensor(tensor, what)
    x = cv.contiguous(tensor)
    if x.is_cuda:  # the GPU backend broadcasts in place: out of place means into a copy (on the current stream)
        out = x if inplace else x.clone(memory_format=torch.contiguous_format)
        src = out
    else:
        out = x if inplace else torch.empty_like(x, memory_format=torch.contiguous_format)
        src = x
    op = Op(_core.BROADCAST, code, cv.shape_of(x), src.data_ptr(), out.data_ptr(), name=_name(name), root=root,
            process_set=ps.process_set_id, device=cv.device_of(x), stream=cv.stream_of(x))

    def finalize(_):
        if inplace:
            _writeback([(tensor, out)])
            return tensor
        return out

    return _api.submit([op], (tensor, x, out), finalize)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root_rank's tensor (a global rank) to every rank of the set, into a new tensor."""
    return _broadcast_async(tensor, root_rank, name, process_set, False)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, root_rank, name, process_set, True)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast (not differentiable, as in Horovod); returns `tensor`."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---------------------------------------------------------------- alltoall

def _splits_list(splits, rows, n):
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dtype == torch.bool:
            raise ValueError(f"alltoall: splits must be integers, got a {splits.dtype} tensor")
        values = [int(v) for v in splits.reshape(-1).tolist()]
    else:
        try:
            values = [int(v) for v in splits]
            if any(isinstance(v, (float, bool)) for v in splits):
                raise TypeError
        except TypeError:
            raise ValueError(f"alltoall: splits must be integers, got {splits!r}") from None
    if len(values) != n:
        raise ValueError(f"alltoall: {len(values)} splits given for a process set of size {n}")
    if any(v < 0 for v in values):
        raise ValueError(f"alltoall: splits must be non-negative, got {values}")
    if sum(values) != rows:
        raise ValueError(f"alltoall: splits add up to {sum(values)} but the first dimension is {rows}")
    return values


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Rows splits[r] of dimension 0 go to set rank r (equal split when splits is None). synchronize()
    returns (output, received_splits), received_splits an int32 tensor of rows received from each rank."""
    ps = cv.process_set(process_set)
    code = cv.check_tensor(tensor, "alltoall")
    cv.at_least_1d(tensor, "alltoall")
    n = cv.set_size(ps)
    rows = int(tensor.shape[0])
    if splits is None:
        if rows % n:
            raise ValueError(f"alltoall: without splits the first dimension ({rows}) must divide evenly "
                             f"among {n} ranks")
        values = []
    else:
        values = _splits_list(splits, rows, n)
    x = cv.contiguous(tensor)
    op = Op(_core.ALLTOALL, code, cv.shape_of(x), x.data_ptr(), 0, name=_name(name), splits=tuple(values),
            process_set=ps.process_set_id, device=cv.device_of(x), stream=cv.stream_of(x))

    def finalize(rs):
        out = cv.from_result(rs[0], tensor.dtype, tensor.device)
        received = rs[0].received_splits
        if not received:  # equal split: every rank sent rows / n
            received = [rows // n] * n
        return out, torch.tensor(list(received), dtype=torch.int32)

    return _api.submit([op], x, finalize)


# ---------------------------------------------------------------- reducescatter

def _reducescatter_async(tensors, grouped, name, op, process_set, prescale_factor, postscale_factor):
    what = "grouped_reducescatter" if grouped else "reducescatter"
    ps = cv.process_set(process_set)
    op = cv.check_op(_api.resolve_op(op, None))
    prescale, postscale = float(prescale_factor), float(postscale_factor)
    n, me = cv.set_size(ps), cv.set_rank(ps)
    tensors = list(tensors)
    if grouped and not tensors:
        raise ValueError(f"{what}: needs at least one tensor")
    inputs, outputs, ops = [], [], []
    for i, t in enumerate(tensors):
        code = cv.check_tensor(t, what)
        cv.at_least_1d(t, what)
        _api.check_reduce(op, code, prescale, postscale)
        x = cv.contiguous(t)
        # Set rank r keeps block r of dim 0: dim0 // n rows, one more for the first dim0 % n ranks.
        rows = x.shape[0] // n + (1 if me < x.shape[0] % n else 0)
        out = torch.empty((rows,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
        inputs.append(x)
        outputs.append(out)
        ops.append(Op(_core.REDUCESCATTER, code, cv.shape_of(x), x.data_ptr(), out.data_ptr(),
                      name=_name(name, i if grouped else None), reduce_op=op, prescale=prescale,
                      postscale=postscale, process_set=ps.process_set_id, device=cv.device_of(x),
                      stream=cv.stream_of(x)))
    return _api.submit(ops, (inputs, outputs), lambda rs: list(outputs) if grouped else outputs[0])


def reducescatter_async(tensor, name=None, op=_api.Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over the set; set rank r receives block r of dimension 0 (see _reducescatter_async)."""
    return _reducescatter_async([tensor], False, name, op, process_set, prescale_factor, postscale_factor)


def grouped_reducescatter_async(tensors, name=None, op=_api.Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    return _reducescatter_async(tensors, True, name, op, process_set, prescale_factor, postscale_factor)


# ---------------------------------------------------------------- sparse (used by DistributedOptimizer)

def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Allreduce of a sparse COO tensor by allgathering its indices and values (duplicates are summed
    when the result is coalesced). Returns a callable that waits and returns the reduced sparse tensor,
    as horovod.torch does."""
    if op not in (_api.Average, _api.Sum):
        raise ValueError("sparse allreduce supports only op=Average or Sum")
    ps = cv.process_set(process_set)
    t = tensor.coalesce()
    # allgather concatenates along dim 0, so the [ndim, nnz] indices travel transposed.
    indices = allgather_async(t.indices().t().contiguous(), name=_name(name and f"{name}.indices"),
                              process_set=ps)
    values = allgather_async(t.values().contiguous(), name=_name(name and f"{name}.values"), process_set=ps)

    def handle():
        v = synchronize(values)
        i = synchronize(indices)
        if op == _api.Average:
            v = v / cv.set_size(ps)
        return torch.sparse_coo_tensor(i.t(), v, t.size()).coalesce()

    return handle


# ---------------------------------------------------------------- barrier, join

def barrier(process_set=global_process_set):
    """Blocks until every rank of the set has reached it."""
    _api.barrier(cv.process_set(process_set).process_set_id)


def join(device=-1):
    """Signals that this rank has no more data (uneven inputs: later allreduces of the others see zeros
    from it); returns the rank that joined last."""
    return _api.join(device)
