"""Collectives on numpy arrays and any C-contiguous buffer-protocol object (bytearray, array.array, ...).

Names and keywords follow horovod.torch: `allreduce` (out of place: a new array, the input untouched),
`allreduce_` (in place: the same object comes back), `allreduce_async` / `allreduce_async_` (a handle for
pyhorovod.poll / pyhorovod.synchronize). What differs from horovod.torch:
- no `compression=` (that is a torch-layer feature);
- a `dtype=` keyword naming the element type when numpy has none for it: bfloat16 (or float16) bit
  patterns held in a uint16 array, e.g. `allreduce(bits, dtype="bfloat16")`. Arrays of ml_dtypes.bfloat16
  are recognised without it.
broadcast's root_rank is a global rank, also on a process set, as in horovod.torch (a root outside the
set is a ValueError).
Every function takes `timeout=` (seconds; default PYHOROVOD_TIMEOUT_SECONDS): past it the request fails
on every rank with HorovodTimeoutError naming the ranks that never submitted it. Horovod has no such
keyword. Every argument is checked before anything is enqueued: a bad one raises ValueError on this rank only and
nothing is communicated.
"""
import operator
from typing import List, Optional, Sequence

import numpy as np

from pyhorovod import _api, _core, basics, process_sets
from pyhorovod._api import Average, Op
from pyhorovod.process_sets import global_process_set

_KIND_CODES = {("u", 1): _core.UINT8, ("i", 1): _core.INT8, ("i", 2): _core.INT16, ("i", 4): _core.INT32,
               ("i", 8): _core.INT64, ("f", 2): _core.FLOAT16, ("f", 4): _core.FLOAT32,
               ("f", 8): _core.FLOAT64, ("b", 1): _core.BOOL}


def _as_array(tensor, what: str, writable: bool) -> np.ndarray:
    if isinstance(tensor, np.ndarray):
        arr = tensor
    else:
        try:
            # Through a memoryview, so the buffer's own format decides the dtype (bytes -> uint8, not "S4")
            arr = np.asarray(memoryview(tensor))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{what}: expected a numpy array or a C-contiguous buffer-protocol object, got "
                             f"{type(tensor).__name__} ({e})") from None
    if not arr.flags.c_contiguous:
        raise ValueError(f"{what}: the array is not C-contiguous (use numpy.ascontiguousarray)")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{what}: the array is read-only; an in-place op needs a writable buffer")
    return arr


def _own_code(dt: np.dtype) -> Optional[int]:
    if dt.name == "bfloat16":  # ml_dtypes.bfloat16, found without importing ml_dtypes
        return _core.BFLOAT16
    if not dt.isnative:
        return None
    return _KIND_CODES.get((dt.kind, dt.itemsize))


def dtype_code(arr: np.ndarray, dtype=None, what: str = "op") -> int:
    """The _core dtype code of `arr`, or of the explicit `dtype` (a name, a _core code or a numpy dtype)
    which must have the array's item size and either match the array's type or reinterpret raw unsigned
    bits (uint16 holding bfloat16)."""
    own = _own_code(arr.dtype)
    if dtype is None:
        if own is None:
            raise ValueError(f"{what}: unsupported dtype {arr.dtype} (supported: "
                             f"{', '.join(_api.DTYPE_NAMES)}; pass dtype='bfloat16' or 'float16' to reduce "
                             f"16-bit float bit patterns held in a uint16 array)")
        return own
    if isinstance(dtype, str):
        code = _api.DTYPE_NAMES.get(dtype)
    elif isinstance(dtype, int) and not isinstance(dtype, bool):
        code = dtype if dtype in _api.CODE_NAMES else None
    else:
        try:
            code = _own_code(np.dtype(dtype))
        except TypeError:
            code = None
    if code is None:
        raise ValueError(f"{what}: dtype={dtype!r} is not one of {', '.join(_api.DTYPE_NAMES)}")
    if _api.ITEMSIZE[code] != arr.dtype.itemsize:
        raise ValueError(f"{what}: dtype={_api.CODE_NAMES[code]} has {_api.ITEMSIZE[code]}-byte elements but "
                         f"the array's are {arr.dtype.itemsize} bytes ({arr.dtype})")
    if own != code and arr.dtype.kind not in "uV":
        raise ValueError(f"{what}: dtype={_api.CODE_NAMES[code]} conflicts with the array's dtype {arr.dtype}")
    return code


def _ptr(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def _at_least_1d(arr: np.ndarray, what: str) -> None:
    if arr.ndim == 0:
        raise ValueError(f"{what}: needs at least one dimension (got a scalar)")


def _from_result(result, dtype: np.dtype) -> np.ndarray:
    """The engine-owned output bytes of allgather/alltoall, viewed as `dtype` in the result's shape."""
    shape = tuple(result.output_shape)
    if result.output is None:
        return np.empty(shape, dtype=dtype)
    return np.asarray(result.output).view(dtype).reshape(shape)


# ---------------------------------------------------------------- allreduce

def _allreduce_async(tensors, inplace, grouped, average, name, op, prescale, postscale, process_set, dtype,
                     timeout=None):
    ps = process_sets.resolve(process_set)
    timeout = _api.check_timeout(timeout)
    op = _api.resolve_op(op, average)
    what = ("grouped_" if grouped else "") + "allreduce" + ("_" if inplace else "")
    prescale, postscale = float(prescale), float(postscale)
    arrs, outs, codes = [], [], []
    for t in tensors:
        arr = _as_array(t, what, writable=inplace)
        code = dtype_code(arr, dtype, what)
        _api.check_reduce(op, code, prescale, postscale)
        arrs.append(arr)
        codes.append(code)
        outs.append(arr if inplace else np.empty_like(arr, order="C"))
    group = _api.new_group_id() if grouped else 0
    ops = [Op(_core.ALLREDUCE, c, a.shape, _ptr(a), _ptr(o),
              name=(f"{name}.{i}" if grouped else name) if name else "", reduce_op=op,
              prescale=prescale, postscale=postscale, process_set=ps.process_set_id,
              group=group, group_size=len(arrs) if grouped else 0, timeout=timeout)
           for i, (a, o, c) in enumerate(zip(arrs, outs, codes))]
    results = list(tensors) if inplace else outs
    finalize = (lambda rs: results) if grouped else (lambda rs: results[0])
    return _api.submit(ops, (arrs, outs), finalize)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set, dtype=None, timeout=None) -> int:
    return _allreduce_async([tensor], False, False, average, name, op, prescale_factor, postscale_factor,
                            process_set, dtype, timeout)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set, dtype=None, timeout=None) -> int:
    return _allreduce_async([tensor], True, False, average, name, op, prescale_factor, postscale_factor,
                            process_set, dtype, timeout)


# dtype -> _core code of the dtypes seen so far (dtype_code costs microseconds: dtype.name is Python code)
_CODE_CACHE = {}


def _allreduce_sync(tensor, inplace, average, name, op, prescale, postscale, process_set, dtype, timeout):
    """allreduce/allreduce_ without a handle: the same checks, in the same order, as _allreduce_async,
    then one engine call (enqueue + wait, the GIL released once; see _api.run_sync). Per-call work is
    kept to what a lone small tensor needs: its latency is mostly this function (issue 6)."""
    if process_set is global_process_set and process_set.process_set_id == 0:
        ps_id = 0
    else:
        ps_id = process_sets.resolve(process_set).process_set_id
    timeout = 0.0 if timeout is None else _api.check_timeout(timeout)
    op = _api.resolve_op(op, average)
    what = "allreduce_" if inplace else "allreduce"
    prescale, postscale = float(prescale), float(postscale)
    if type(tensor) is np.ndarray and tensor.flags.c_contiguous and (not inplace or tensor.flags.writeable):
        arr = tensor
    else:
        arr = _as_array(tensor, what, writable=inplace)
    code = _CODE_CACHE.get(arr.dtype) if dtype is None else None
    if code is None:
        code = dtype_code(arr, dtype, what)
        if dtype is None:
            _CODE_CACHE[arr.dtype] = code
    _api.check_reduce(op, code, prescale, postscale)
    out = arr if inplace else np.empty_like(arr, order="C")
    _api.run_sync(_core.ALLREDUCE, name, code, arr.shape, arr, out, op, prescale, postscale, 0, ps_id, timeout)
    return tensor if inplace else out


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set, dtype=None, timeout=None):
    """Reduction over all ranks of the set (default op: Average, as Horovod), into a new array. On integer
    arrays Average is the sum divided by the set's size truncated toward zero (-11 / 2 gives -5), and
    prescale_factor/postscale_factor must be whole numbers (else ValueError)."""
    return _allreduce_sync(tensor, False, average, name, op, prescale_factor, postscale_factor, process_set,
                           dtype, timeout)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, dtype=None, timeout=None):
    return _allreduce_sync(tensor, True, average, name, op, prescale_factor, postscale_factor, process_set,
                           dtype, timeout)


def grouped_allreduce_async(tensors: Sequence, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set, dtype=None, timeout=None) -> int:
    """One handle for a list of tensors reduced as one unit (fused together, completed together)."""
    return _allreduce_async(list(tensors), False, True, average, name, op, prescale_factor,
                            postscale_factor, process_set, dtype, timeout)


def grouped_allreduce_async_(tensors: Sequence, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set, dtype=None,
                             timeout=None) -> int:
    return _allreduce_async(list(tensors), True, True, average, name, op, prescale_factor,
                            postscale_factor, process_set, dtype, timeout)


def grouped_allreduce(tensors: Sequence, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, dtype=None, timeout=None) -> List:
    return _api.synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                                    postscale_factor, process_set, dtype, timeout))


def grouped_allreduce_(tensors: Sequence, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, dtype=None, timeout=None) -> List:
    return _api.synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                     postscale_factor, process_set, dtype, timeout))


# ---------------------------------------------------------------- allgather, broadcast

def allgather_async(tensor, name=None, process_set=global_process_set, dtype=None, timeout=None) -> int:
    """Concatenation along dimension 0 of every rank's tensor (dim 0 may differ per rank)."""
    ps = process_sets.resolve(process_set)
    arr = _as_array(tensor, "allgather", writable=False)
    _at_least_1d(arr, "allgather")
    code = dtype_code(arr, dtype, "allgather")
    op = Op(_core.ALLGATHER, code, arr.shape, _ptr(arr), 0, name=name or "", process_set=ps.process_set_id,
            timeout=_api.check_timeout(timeout))
    return _api.submit([op], arr, lambda rs: _from_result(rs[0], arr.dtype))


def allgather(tensor, name=None, process_set=global_process_set, dtype=None, timeout=None):
    return _api.synchronize(allgather_async(tensor, name, process_set, dtype, timeout))


def _broadcast_async(tensor, root_rank, name, process_set, dtype, inplace, timeout=None):
    what = "broadcast_" if inplace else "broadcast"
    ps = process_sets.resolve(process_set)
    timeout = _api.check_timeout(timeout)
    root = _api.check_root(root_rank, ps.ranks)
    arr = _as_array(tensor, what, writable=inplace)
    code = dtype_code(arr, dtype, what)
    out = arr if inplace else np.empty_like(arr, order="C")
    op = Op(_core.BROADCAST, code, arr.shape, _ptr(arr), _ptr(out), name=name or "", root=root,
            process_set=ps.process_set_id, timeout=timeout)
    result = tensor if inplace else out
    return _api.submit([op], (arr, out), lambda rs: result)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set, dtype=None, timeout=None) -> int:
    return _broadcast_async(tensor, root_rank, name, process_set, dtype, False, timeout)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set, dtype=None,
                     timeout=None) -> int:
    return _broadcast_async(tensor, root_rank, name, process_set, dtype, True, timeout)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set, dtype=None, timeout=None):
    """root_rank's tensor, copied to every rank (a new array; the input is untouched)."""
    return _api.synchronize(broadcast_async(tensor, root_rank, name, process_set, dtype, timeout))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set, dtype=None, timeout=None):
    return _api.synchronize(broadcast_async_(tensor, root_rank, name, process_set, dtype, timeout))


# ---------------------------------------------------------------- alltoall, reducescatter

def _check_splits(splits, rows: int, n: int) -> List[int]:
    """The alltoall splits as a list of ints ([] for an equal split: splits None, rows divisible by n)."""
    if splits is None:
        if rows % n:
            raise ValueError(f"alltoall: without splits the first dimension ({rows}) must divide "
                             f"evenly among {n} ranks")
        return []
    try:
        values = [operator.index(s) for s in np.asarray(splits).ravel().tolist()]
    except TypeError:
        raise ValueError(f"alltoall: splits must be integers, got {splits!r}") from None
    if len(values) != n:
        raise ValueError(f"alltoall: {len(values)} splits given for a process set of size {n}")
    if any(v < 0 for v in values):
        raise ValueError(f"alltoall: splits must be non-negative, got {values}")
    if sum(values) != rows:
        raise ValueError(f"alltoall: splits add up to {sum(values)} but the first dimension is {rows}")
    return values


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set, dtype=None,
                   timeout=None) -> int:
    """Rows splits[r] of dimension 0 go to rank r (equal split when splits is None); the result is what
    every rank sent to us, in rank order. With splits given, synchronize returns (output, received_splits)."""
    ps = process_sets.resolve(process_set)
    arr = _as_array(tensor, "alltoall", writable=False)
    _at_least_1d(arr, "alltoall")
    code = dtype_code(arr, dtype, "alltoall")
    values = _check_splits(splits, arr.shape[0], len(ps.ranks))
    op = Op(_core.ALLTOALL, code, arr.shape, _ptr(arr), 0, name=name or "", splits=tuple(values),
            process_set=ps.process_set_id, timeout=_api.check_timeout(timeout))

    def finalize(rs):
        out = _from_result(rs[0], arr.dtype)
        if splits is None:
            return out
        return out, np.asarray(rs[0].received_splits, dtype=np.int32)

    return _api.submit([op], arr, finalize)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set, dtype=None, timeout=None):
    return _api.synchronize(alltoall_async(tensor, splits, name, process_set, dtype, timeout))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0, dtype=None, timeout=None) -> int:
    """Reduces over the set, then set rank r keeps block r of dimension 0: dim0 // n rows, one more for
    the first dim0 % n ranks (as Horovod). Default op: Average, as in horovod.torch."""
    ps = process_sets.resolve(process_set)
    arr = _as_array(tensor, "reducescatter", writable=False)
    _at_least_1d(arr, "reducescatter")
    code = dtype_code(arr, dtype, "reducescatter")
    op = _api.resolve_op(op, None)
    _api.check_reduce(op, code, float(prescale_factor), float(postscale_factor))
    n, me = len(ps.ranks), ps.ranks.index(basics.rank())
    rows = arr.shape[0] // n + (1 if me < arr.shape[0] % n else 0)
    out = np.empty((rows,) + arr.shape[1:], dtype=arr.dtype)
    req = Op(_core.REDUCESCATTER, code, arr.shape, _ptr(arr), _ptr(out), name=name or "", reduce_op=op,
             prescale=float(prescale_factor), postscale=float(postscale_factor), process_set=ps.process_set_id,
             timeout=_api.check_timeout(timeout))
    return _api.submit([req], (arr, out), lambda rs: out)


def reducescatter(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0, dtype=None, timeout=None):
    return _api.synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                                postscale_factor, dtype, timeout))


# ---------------------------------------------------------------- CUDA arrays (issue 9)

def _route_cuda_arrays():
    """Objects with __cuda_array_interface__ (CuPy arrays) go to pyhorovod._cuda_arrays; numpy arrays pay
    one type check and one call frame for it."""
    import inspect
    from pyhorovod import _cuda_arrays as ca
    g = globals()
    sync = _api.synchronize

    def ar(inplace, grouped):
        return lambda a: ca.allreduce_async(list(a["tensors"]) if grouped else [a["tensor"]], inplace, grouped,
                                            a["average"], a["name"], a["op"], a["prescale_factor"],
                                            a["postscale_factor"], a["process_set"], a["dtype"], a["timeout"])

    def bc(inplace):
        return lambda a: ca.broadcast_async(a["tensor"], a["root_rank"], a["name"], a["process_set"], a["dtype"],
                                            inplace, a["timeout"])

    ag = lambda a: ca.allgather_async(a["tensor"], a["name"], a["process_set"], a["dtype"], a["timeout"])
    a2a = lambda a: ca.alltoall_async(a["tensor"], a["splits"], a["name"], a["process_set"], a["dtype"],
                                      a["timeout"])
    rs = lambda a: ca.reducescatter_async(a["tensor"], a["name"], a["op"], a["process_set"], a["prescale_factor"],
                                          a["postscale_factor"], a["dtype"], a["timeout"])
    routes = {"allreduce_async": (ar(False, False), False), "allreduce_async_": (ar(True, False), False),
              "allreduce": (ar(False, False), True), "allreduce_": (ar(True, False), True),
              "grouped_allreduce_async": (ar(False, True), False), "grouped_allreduce_async_": (ar(True, True), False),
              "grouped_allreduce": (ar(False, True), True), "grouped_allreduce_": (ar(True, True), True),
              "allgather_async": (ag, False), "allgather": (ag, True),
              "broadcast_async": (bc(False), False), "broadcast_async_": (bc(True), False),
              "broadcast": (bc(False), True), "broadcast_": (bc(True), True),
              "alltoall_async": (a2a, False), "alltoall": (a2a, True),
              "reducescatter_async": (rs, False), "reducescatter": (rs, True)}

    def hook(name, route, wait):
        plain = g[name]
        sig = inspect.signature(plain)
        grouped = name.startswith("grouped")

        def f(*args, **kw):
            tensor = args[0] if args else kw.get("tensors" if grouped else "tensor")
            if type(tensor) is not np.ndarray:
                probe = tensor[0] if grouped and tensor is not None and len(tensor) else tensor
                if ca.is_cuda_array(probe):
                    bound = sig.bind(*args, **kw)
                    bound.apply_defaults()
                    handle = route(bound.arguments)
                    return sync(handle) if wait else handle
            return plain(*args, **kw)

        f.__name__, f.__qualname__, f.__doc__, f.__wrapped__ = plain.__name__, plain.__qualname__, plain.__doc__, plain
        g[name] = f

    for name, (route, wait) in routes.items():
        hook(name, route, wait)


_route_cuda_arrays()
