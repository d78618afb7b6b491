"""CUDA arrays (CuPy, or anything exposing `__cuda_array_interface__`) through the framework-free API.

pyhorovod._numpy_ops routes a call here when its tensor argument has `__cuda_array_interface__` (CAI:
a device pointer, shape, typestr and strides, see numba's specification). The arrays go to the engine as
device requests (device >= 0), which the GPU backend (NCCL) runs; builds without it refuse them with a
clear ValueError for that request alone.

- device: the array's `.device.id` (CuPy) or `.device.index` (torch), else CuPy's pointer attributes.
- stream: the CAI's "stream" entry (v3: the producer's cudaStream_t; 1 = legacy default, 2 = per-thread
  default, both valid cudaStream_t values as they are) or CuPy's current stream; the backend orders the
  collective after the work queued on it.
- Outputs of out-of-place ops are allocated with CuPy (needed then); allgather/alltoall results are the
  engine's own device memory wrapped by `cupy.asarray` without a copy (_core.DeviceBuffer).
"""
from typing import List, Sequence

import numpy as np

from pyhorovod import _api, _core, basics, process_sets
from pyhorovod._api import Op


def is_cuda_array(x) -> bool:
    return not isinstance(x, np.ndarray) and hasattr(x, "__cuda_array_interface__")


class _Dev:
    """What the engine needs of one CUDA array."""

    def __init__(self, x, what: str, dtype=None):
        cai = x.__cuda_array_interface__
        self.obj = x
        self.shape = tuple(int(s) for s in cai["shape"])
        self.np_dtype = np.dtype(cai["typestr"])
        strides = cai.get("strides")
        if strides is not None:
            expected, step = [], self.np_dtype.itemsize
            for s in reversed(self.shape):
                expected.append(step)
                step *= s
            if tuple(strides) != tuple(reversed(expected)) and int(np.prod(self.shape)) > 1:
                raise ValueError(f"{what}: the CUDA array is not C-contiguous (copy it first)")
        self.ptr = int(cai["data"][0])
        from pyhorovod import _numpy_ops  # late: _numpy_ops imports this module
        self.code = _numpy_ops.dtype_code(np.empty(0, self.np_dtype), dtype, what)
        self.device = _device_of(x, self.ptr)
        stream = cai.get("stream")
        self.stream = int(stream) if stream else _current_stream()


def _device_of(x, ptr: int) -> int:
    dev = getattr(x, "device", None)
    for attr in ("id", "index"):
        v = getattr(dev, attr, None)
        if isinstance(v, int):
            return v
    try:
        import cupy
        return int(cupy.cuda.runtime.pointerGetAttributes(ptr).device)
    except Exception:
        return 0


def _current_stream() -> int:
    try:
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)
    except Exception:
        return 0


def _cupy(what: str):
    try:
        import cupy
    except ImportError:
        raise ValueError(f"{what}: CUDA arrays need CuPy for this op's output (or use the in-place "
                         f"variant)") from None
    return cupy


def _empty(like: _Dev, shape, what: str):
    cupy = _cupy(what)
    with cupy.cuda.Device(like.device):
        return cupy.empty(shape, dtype=like.np_dtype)


def _wrap(result, d: _Dev, what: str):
    """The engine-owned device output (a DeviceBuffer) as a CuPy array of the result's shape, no copy."""
    cupy = _cupy(what)
    shape = tuple(int(s) for s in result.output_shape)
    if result.output is None:
        return _empty(d, shape, what)
    return cupy.asarray(result.output).view(d.np_dtype).reshape(shape)


def _op(kind, d: _Dev, out_ptr: int, **kw) -> Op:
    return Op(kind, d.code, d.shape, d.ptr, out_ptr, device=d.device, stream=d.stream, **kw)


def allreduce_async(tensors: Sequence, inplace: bool, grouped: bool, average, name, op, prescale, postscale,
                    process_set, dtype, timeout) -> int:
    ps = process_sets.resolve(process_set)
    timeout = _api.check_timeout(timeout)
    op = _api.resolve_op(op, average)
    what = ("grouped_" if grouped else "") + "allreduce" + ("_" if inplace else "")
    devs = [_Dev(t, what, dtype) for t in tensors]
    for d in devs:
        _api.check_reduce(op, d.code, float(prescale), float(postscale))
    outs = [d.obj if inplace else _empty(d, d.shape, what) for d in devs]
    group = _api.new_group_id() if grouped else 0
    ops = [_op(_core.ALLREDUCE, d, _Dev(o, what, dtype).ptr,
               name=(f"{name}.{i}" if grouped else name) if name else "", reduce_op=op,
               prescale=float(prescale), postscale=float(postscale), process_set=ps.process_set_id,
               group=group, group_size=len(devs) if grouped else 0, timeout=timeout)
           for i, (d, o) in enumerate(zip(devs, outs))]
    results: List = list(tensors) if inplace else outs
    return _api.submit(ops, (devs, outs), (lambda rs: results) if grouped else (lambda rs: results[0]))


def allgather_async(tensor, name, process_set, dtype, timeout) -> int:
    ps = process_sets.resolve(process_set)
    d = _Dev(tensor, "allgather", dtype)
    if not d.shape:
        raise ValueError("allgather: needs at least one dimension (got a scalar)")
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
    d = _Dev(tensor, what, dtype)
    if not inplace:
        cupy = _cupy(what)
        with cupy.cuda.Device(d.device):
            copy = cupy.array(cupy.asarray(tensor), copy=True)
        d = _Dev(copy, what, dtype)
        d.stream = _current_stream()
    op = _op(_core.BROADCAST, d, d.ptr, name=name or "", root=root, process_set=ps.process_set_id,
             timeout=timeout)
    result = d.obj
    return _api.submit([op], d, lambda rs: result)


def alltoall_async(tensor, splits, name, process_set, dtype, timeout) -> int:
    from pyhorovod import _numpy_ops
    ps = process_sets.resolve(process_set)
    d = _Dev(tensor, "alltoall", dtype)
    if not d.shape:
        raise ValueError("alltoall: needs at least one dimension (got a scalar)")
    values = _numpy_ops._check_splits(splits, d.shape[0], len(ps.ranks))
    op = _op(_core.ALLTOALL, d, 0, name=name or "", splits=tuple(values), process_set=ps.process_set_id,
             timeout=_api.check_timeout(timeout))

    def finalize(rs):
        out = _wrap(rs[0], d, "alltoall")
        return out if splits is None else (out, np.asarray(rs[0].received_splits, dtype=np.int32))

    return _api.submit([op], d, finalize)


def reducescatter_async(tensor, name, op, process_set, prescale, postscale, dtype, timeout) -> int:
    ps = process_sets.resolve(process_set)
    d = _Dev(tensor, "reducescatter", dtype)
    if not d.shape:
        raise ValueError("reducescatter: needs at least one dimension (got a scalar)")
    op = _api.resolve_op(op, None)
    _api.check_reduce(op, d.code, float(prescale), float(postscale))
    n, me = len(ps.ranks), ps.ranks.index(basics.rank())
    rows = d.shape[0] // n + (1 if me < d.shape[0] % n else 0)
    out = _empty(d, (rows,) + d.shape[1:], "reducescatter")
    req = _op(_core.REDUCESCATTER, d, _Dev(out, "reducescatter").ptr, name=name or "", reduce_op=op,
              prescale=float(prescale), postscale=float(postscale), process_set=ps.process_set_id,
              timeout=_api.check_timeout(timeout))
    return _api.submit([req], (d, out), lambda rs: out)
