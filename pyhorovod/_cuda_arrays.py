"""CUDA arrays (CuPy, or anything exposing `__cuda_array_interface__`) through the framework-free API.

The numpy front (pyhorovod/_numpy_allreduce.py, _numpy_exchange.py) hands a call here when its tensor is
a CUDA array (pyhorovod/_buffers.py says what one is and reads its pointer, device and stream). The arrays
go to the engine as device requests (device >= 0), which the GPU backend (NCCL) runs; builds without it
refuse them with a clear ValueError for that request alone.

Outputs of out-of-place ops are allocated with CuPy (needed then); allgather/alltoall results are the
engine's own device memory wrapped by `cupy.asarray` without a copy (_core.DeviceBuffer).
"""
from typing import List, Sequence

import numpy as np

from pyhorovod import _api, _core, basics, process_sets
from pyhorovod._api import Op
from pyhorovod._buffers import Buffer, adapt, current_stream
from pyhorovod._collective_shapes import at_least_1d, check_splits, reducescatter_shape


def _cupy(what: str):
    try:
        import cupy
    except ImportError:
        raise ValueError(f"{what}: CUDA arrays need CuPy for this op's output (or use the in-place "
                         f"variant)") from None
    return cupy


def _empty(like: Buffer, shape, what: str):
    cupy = _cupy(what)
    with cupy.cuda.Device(like.device):
        return cupy.empty(shape, dtype=like.np_dtype)


def _wrap(result, d: Buffer, what: str):
    """The engine-owned device output (a DeviceBuffer) as a CuPy array of the result's shape, no copy."""
    cupy = _cupy(what)
    shape = tuple(int(s) for s in result.output_shape)
    if result.output is None:
        return _empty(d, shape, what)
    return cupy.asarray(result.output).view(d.np_dtype).reshape(shape)


def _op(kind, d: Buffer, out_ptr: int, **kw) -> Op:
    return Op(kind, d.code, d.shape, d.ptr, out_ptr, device=d.device, stream=d.stream, **kw)


def allreduce_async(tensors: Sequence, inplace: bool, grouped: bool, average, name, op, prescale, postscale,
                    process_set, dtype, timeout) -> int:
    ps = process_sets.resolve(process_set)
    timeout = _api.check_timeout(timeout)
    op = _api.resolve_op(op, average)
    what = ("grouped_" if grouped else "") + "allreduce" + ("_" if inplace else "")
    devs = [adapt(t, what, dtype=dtype) for t in tensors]
    for d in devs:
        _api.check_reduce(op, d.code, float(prescale), float(postscale))
    outs = [d.obj if inplace else _empty(d, d.shape, what) for d in devs]
    group = _api.new_group_id() if grouped else 0
    ops = [_op(_core.ALLREDUCE, d, adapt(o, what, dtype=dtype).ptr,
               name=(f"{name}.{i}" if grouped else name) if name else "", reduce_op=op,
               prescale=float(prescale), postscale=float(postscale), process_set=ps.process_set_id,
               group=group, group_size=len(devs) if grouped else 0, timeout=timeout)
           for i, (d, o) in enumerate(zip(devs, outs))]
    results: List = list(tensors) if inplace else outs
    return _api.submit(ops, (devs, outs), (lambda rs: results) if grouped else (lambda rs: results[0]))


def allgather_async(tensor, name, process_set, dtype, timeout) -> int:
    ps = process_sets.resolve(process_set)
    d = adapt(tensor, "allgather", dtype=dtype)
    at_least_1d(d.shape, "allgather")
    op = _op(_core.ALLGATHER, d, 0, name=name or "", process_set=ps.process_set_id,
             timeout=_api.check_timeout(timeout))
    return _api.submit([op], d, lambda rs: _wrap(rs[0], d, "allgather"))


def broadcast_async(tensor, root_rank, name, process_set, dtype, inplace, timeout) -> int:
    """CUDA broadcasts run in place; the out-of-place form broadcasts into a copy made on the current
    stream (so the backend, waiting on that stream, sees the copy)."""
    what = "broadcast_" if inplace else "broadcast"
    ps = process_sets.resolve(process_set)
    timeout = _api.check_timeout(timeout)
    root = _api.check_root(root_rank, ps.ranks)
    d = adapt(tensor, what, dtype=dtype)
    if not inplace:
        cupy = _cupy(what)
        with cupy.cuda.Device(d.device):
            copy = cupy.array(cupy.asarray(tensor), copy=True)
        d = adapt(copy, what, dtype=dtype)
        d.stream = current_stream()
    op = _op(_core.BROADCAST, d, d.ptr, name=name or "", root=root, process_set=ps.process_set_id,
             timeout=timeout)
    result = d.obj
    return _api.submit([op], d, lambda rs: result)


def alltoall_async(tensor, splits, name, process_set, dtype, timeout) -> int:
    ps = process_sets.resolve(process_set)
    d = adapt(tensor, "alltoall", dtype=dtype)
    at_least_1d(d.shape, "alltoall")
    values = check_splits(splits, d.shape[0], len(ps.ranks))
    op = _op(_core.ALLTOALL, d, 0, name=name or "", splits=tuple(values), process_set=ps.process_set_id,
             timeout=_api.check_timeout(timeout))

    def finalize(rs):
        out = _wrap(rs[0], d, "alltoall")
        return out if splits is None else (out, np.asarray(rs[0].received_splits, dtype=np.int32))

    return _api.submit([op], d, finalize)


def reducescatter_async(tensor, name, op, process_set, prescale, postscale, dtype, timeout) -> int:
    ps = process_sets.resolve(process_set)
    d = adapt(tensor, "reducescatter", dtype=dtype)
    at_least_1d(d.shape, "reducescatter")
    op = _api.resolve_op(op, None)
    _api.check_reduce(op, d.code, float(prescale), float(postscale))
    out = _empty(d, reducescatter_shape(d.shape, ps.ranks, basics.rank()), "reducescatter")
    req = _op(_core.REDUCESCATTER, d, adapt(out, "reducescatter").ptr, name=name or "", reduce_op=op,
              prescale=float(prescale), postscale=float(postscale), process_set=ps.process_set_id,
              timeout=_api.check_timeout(timeout))
    return _api.submit([req], (d, out), lambda rs: out)
