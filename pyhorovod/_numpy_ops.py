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
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from pyhorovod import _api, _core, basics, process_sets
from pyhorovod._api import Average, Op
from pyhorovod.process_sets import ProcessSet, global_process_set

_KIND_CODES = {("u", 1): _core.UINT8, ("i", 1): _core.INT8, ("i", 2): _core.INT16, ("i", 4): _core.INT32,
               ("i", 8): _core.INT64, ("f", 2): _core.FLOAT16, ("f", 4): _core.FLOAT32,
               ("f", 8): _core.FLOAT64, ("b", 1): _core.BOOL}


# Argument and error descriptions that several collectives' docstrings share: _documented() puts them
# where a docstring says {common_args} or {errors}, so help() and the API reference show the full text.
_DOC_PARTS = {
    "common_args": """name: the request's name, the same on every rank (automatic when None).
        process_set: the ranks that take part (default: all); this rank must be one of them.
        dtype: the element type, for bit patterns of a type numpy lacks (``"bfloat16"``).
        timeout: seconds before the request fails with HorovodTimeoutError (default
            ``PYHOROVOD_TIMEOUT_SECONDS``).""",
    "errors": """Raises:
        ValueError: a bad argument (an unsupported dtype, a non-contiguous or, for in-place forms,
            read-only buffer, a scale factor that is not whole on integers, Average on bool, ...),
            raised on this rank before anything is sent.
        HorovodTimeoutError: not every rank of the set submitted the request in time.
        HorovodInternalError: the collective failed (a peer died, a connection broke).""",
}


def _documented(func):
    for key, text in _DOC_PARTS.items():
        if func.__doc__:  # None under python -OO
            func.__doc__ = func.__doc__.replace("{" + key + "}", text)
    return func


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


def allreduce_async(tensor: Any, average: Optional[bool] = None, name: Optional[str] = None,
                    op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
                    timeout: Optional[float] = None) -> int:
    """Starts :func:`allreduce` and returns at once.

    Returns:
        A handle: :func:`poll` says whether it is done, :func:`synchronize` waits and returns the new
        array. Keep the input alive and unchanged until then.
    """
    return _allreduce_async([tensor], False, False, average, name, op, prescale_factor, postscale_factor,
                            process_set, dtype, timeout)


def allreduce_async_(tensor: Any, average: Optional[bool] = None, name: Optional[str] = None,
                     op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
                     timeout: Optional[float] = None) -> int:
    """Starts :func:`allreduce_` (in place) and returns a handle; :func:`synchronize` returns ``tensor``."""
    return _allreduce_async([tensor], True, False, average, name, op, prescale_factor, postscale_factor,
                            process_set, dtype, timeout)


# dtype -> _core code of the dtypes seen so far (dtype_code costs microseconds: dtype.name is Python code)
_CODE_CACHE = {}


def _allreduce_sync(tensor, inplace, average, name, op, prescale, postscale, process_set, dtype, timeout):
    """allreduce/allreduce_ without a handle: the same checks, in the same order, as _allreduce_async,
    then one engine call (enqueue + wait, the GIL released once; see _api.run_sync). Per-call work is
    kept to what a lone small tensor needs: its latency is mostly this function."""
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


@_documented
def allreduce(tensor: Any, average: Optional[bool] = None, name: Optional[str] = None,
              op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
              timeout: Optional[float] = None) -> np.ndarray:
    """Reduces a tensor over the ranks of the process set, into a new array.

    Every rank of the set passes a tensor of the same shape and dtype; every rank gets the same result.
    The input is left untouched.

    Args:
        tensor: a numpy array, or any C-contiguous buffer-protocol object (bytearray, array.array,
            memoryview).
        average: deprecated spelling of ``op`` (True: Average, False: Sum); give one or the other.
        name: the request's name, the same on every rank; unnamed calls get automatic names
            (``allreduce.noname.3``), which pair up when every rank makes the same sequence of calls.
        op: :data:`Sum`, :data:`Average` (the default), :data:`Min`, :data:`Max`, :data:`Product` or
            :data:`Adasum`.
        prescale_factor: multiplies every rank's input before the reduction.
        postscale_factor: multiplies the result. On integer tensors both must be whole numbers.
        process_set: the ranks that take part (default: all); this rank must be one of them.
        dtype: the element type, when the array's own says nothing or something else: ``"bfloat16"``
            or ``"float16"`` for bit patterns held in a uint16 array. A pyhorovod addition.
        timeout: seconds before the request fails with HorovodTimeoutError on every rank (default
            ``PYHOROVOD_TIMEOUT_SECONDS``). A pyhorovod addition.

    Returns:
        A new numpy array of the input's shape and dtype holding the reduction. On integer tensors,
        Average is the sum divided by the set's size, truncated toward zero (-11 over 2 ranks gives -5).

    {errors}
    """
    return _allreduce_sync(tensor, False, average, name, op, prescale_factor, postscale_factor, process_set,
                           dtype, timeout)


def allreduce_(tensor: Any, average: Optional[bool] = None, name: Optional[str] = None,
               op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
               timeout: Optional[float] = None) -> Any:
    """As :func:`allreduce`, writing the result into ``tensor`` (which must be writable).

    Returns:
        ``tensor`` itself, now holding the reduction.
    """
    return _allreduce_sync(tensor, True, average, name, op, prescale_factor, postscale_factor, process_set,
                           dtype, timeout)


def grouped_allreduce_async(tensors: Sequence[Any], average: Optional[bool] = None, name: Optional[str] = None,
                            op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
                            timeout: Optional[float] = None) -> int:
    """Starts :func:`grouped_allreduce` and returns one handle for the whole list."""
    return _allreduce_async(list(tensors), False, True, average, name, op, prescale_factor,
                            postscale_factor, process_set, dtype, timeout)


def grouped_allreduce_async_(tensors: Sequence[Any], average: Optional[bool] = None, name: Optional[str] = None,
                             op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set,
                             dtype: Union[None, str, int, np.dtype] = None, timeout: Optional[float] = None) -> int:
    """Starts :func:`grouped_allreduce_` (in place) and returns one handle for the whole list."""
    return _allreduce_async(list(tensors), True, True, average, name, op, prescale_factor,
                            postscale_factor, process_set, dtype, timeout)


def grouped_allreduce(tensors: Sequence[Any], average: Optional[bool] = None, name: Optional[str] = None,
                      op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
                      timeout: Optional[float] = None) -> List[np.ndarray]:
    """Reduces a list of tensors as one unit: negotiated, fused and completed together.

    Takes the keywords of :func:`allreduce`, applied to every tensor; the tensors may differ in shape
    and dtype. A name, when given, is suffixed ``.0``, ``.1``, ... per tensor.

    Returns:
        A list of new arrays, one per input, in order.
    """
    return _api.synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                                    postscale_factor, process_set, dtype, timeout))


def grouped_allreduce_(tensors: Sequence[Any], average: Optional[bool] = None, name: Optional[str] = None,
                       op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
                       timeout: Optional[float] = None) -> List[Any]:
    """As :func:`grouped_allreduce`, writing each result into its input; returns the inputs."""
    return _api.synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                     postscale_factor, process_set, dtype, timeout))


# ---------------------------------------------------------------- allgather, broadcast

def allgather_async(tensor: Any, name: Optional[str] = None, process_set: ProcessSet = global_process_set,
                    dtype: Union[None, str, int, np.dtype] = None, timeout: Optional[float] = None) -> int:
    """Starts :func:`allgather` and returns a handle; :func:`synchronize` returns the gathered array."""
    return _allgather(tensor, name, process_set, dtype, timeout, _api.submit)


def _allgather(tensor, name, process_set, dtype, timeout, run):
    """run: _api.submit (returns a handle) or _api.submit_sync (waits, returns the result)."""
    ps = process_sets.resolve(process_set)
    arr = _as_array(tensor, "allgather", writable=False)
    _at_least_1d(arr, "allgather")
    code = dtype_code(arr, dtype, "allgather")
    op = Op(_core.ALLGATHER, code, arr.shape, _ptr(arr), 0, name=name or "", process_set=ps.process_set_id,
            timeout=_api.check_timeout(timeout))
    return run([op], arr, lambda rs: _from_result(rs[0], arr.dtype))


@_documented
def allgather(tensor: Any, name: Optional[str] = None, process_set: ProcessSet = global_process_set,
              dtype: Union[None, str, int, np.dtype] = None, timeout: Optional[float] = None) -> np.ndarray:
    """Concatenates every rank's tensor along dimension 0, in rank order.

    The ranks' first dimensions may differ; the other dimensions and the dtype must agree.

    Args:
        tensor: an array (or buffer) with at least one dimension.
        {common_args}

    Returns:
        A new array whose first dimension is the sum of the ranks' first dimensions.

    {errors}
    """
    return _allgather(tensor, name, process_set, dtype, timeout, _api.submit_sync)


def _broadcast_async(tensor, root_rank, name, process_set, dtype, inplace, timeout=None, run=_api.submit):
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
    return run([op], (arr, out), lambda rs: result)


def broadcast_async(tensor: Any, root_rank: int, name: Optional[str] = None,
                    process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
                    timeout: Optional[float] = None) -> int:
    """Starts :func:`broadcast` and returns a handle; :func:`synchronize` returns the new array."""
    return _broadcast_async(tensor, root_rank, name, process_set, dtype, False, timeout)


def broadcast_async_(tensor: Any, root_rank: int, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
                     timeout: Optional[float] = None) -> int:
    """Starts :func:`broadcast_` (in place) and returns a handle; :func:`synchronize` returns ``tensor``."""
    return _broadcast_async(tensor, root_rank, name, process_set, dtype, True, timeout)


@_documented
def broadcast(tensor: Any, root_rank: int, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
              timeout: Optional[float] = None) -> np.ndarray:
    """Copies the root rank's tensor to every rank of the process set, into a new array.

    Args:
        tensor: on the root, the data to send; elsewhere an array of the same shape and dtype (its
            values are not read).
        root_rank: the sending rank, a global rank (also on a process set, as in Horovod); a root
            outside the set is a ValueError.
        {common_args}

    Returns:
        A new array holding the root's values (on the root too); the input is untouched.

    {errors}
    """
    return _broadcast_async(tensor, root_rank, name, process_set, dtype, False, timeout, _api.submit_sync)


def broadcast_(tensor: Any, root_rank: int, name: Optional[str] = None,
               process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
               timeout: Optional[float] = None) -> Any:
    """As :func:`broadcast`, writing the root's values into ``tensor``; returns ``tensor``."""
    return _broadcast_async(tensor, root_rank, name, process_set, dtype, True, timeout, _api.submit_sync)


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


def alltoall_async(tensor: Any, splits: Optional[Sequence[int]] = None, name: Optional[str] = None,
                   process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
                   timeout: Optional[float] = None) -> int:
    """Starts :func:`alltoall` and returns a handle; :func:`synchronize` returns what alltoall returns."""
    return _alltoall(tensor, splits, name, process_set, dtype, timeout, _api.submit)


def _alltoall(tensor, splits, name, process_set, dtype, timeout, run):
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

    return run([op], arr, finalize)


@_documented
def alltoall(tensor: Any, splits: Optional[Sequence[int]] = None, name: Optional[str] = None,
             process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
             timeout: Optional[float] = None) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
    """Sends a slice of dimension 0 to each rank of the set and receives one from each.

    Args:
        tensor: an array with at least one dimension.
        splits: how many rows go to each set rank, in set-rank order (they must add up to the first
            dimension). None: equal parts, which needs a first dimension divisible by the set's size.
        {common_args}

    Returns:
        The rows received from every rank, concatenated in rank order. With ``splits`` given, a tuple
        ``(output, received_splits)``, received_splits an int32 array of the rows from each rank.

    {errors}
    """
    return _alltoall(tensor, splits, name, process_set, dtype, timeout, _api.submit_sync)


def reducescatter_async(tensor: Any, name: Optional[str] = None, op: int = Average,
                        process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                        postscale_factor: float = 1.0, dtype: Union[None, str, int, np.dtype] = None,
                        timeout: Optional[float] = None) -> int:
    """Starts :func:`reducescatter` and returns a handle; :func:`synchronize` returns this rank's block."""
    return _reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor, dtype, timeout,
                          _api.submit)


def _reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor, dtype, timeout, run):
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
    return run([req], (arr, out), lambda rs: out)


@_documented
def reducescatter(tensor: Any, name: Optional[str] = None, op: int = Average,
                  process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0, dtype: Union[None, str, int, np.dtype] = None,
                  timeout: Optional[float] = None) -> np.ndarray:
    """Reduces a tensor over the process set, then gives each rank one block of the result.

    Set rank r keeps block r of dimension 0: ``dim0 // n`` rows, one more for the first ``dim0 % n``
    ranks (n the set's size), as Horovod splits.

    Args:
        tensor: an array with at least one dimension, the same shape on every rank.
        name: the request's name, the same on every rank (automatic when None).
        op: :data:`Sum`, :data:`Average` (the default), :data:`Min`, :data:`Max` or :data:`Product`
            (not Adasum).
        process_set: the ranks that take part (default: all).
        prescale_factor: multiplies every rank's input before the reduction.
        postscale_factor: multiplies the result.
        dtype: the element type, for bit patterns of a type numpy lacks (``"bfloat16"``).
        timeout: seconds before the request fails with HorovodTimeoutError.

    Returns:
        A new array: this rank's block of the reduction.

    {errors}
    """
    return _reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor, dtype, timeout,
                          _api.submit_sync)


# ---------------------------------------------------------------- CUDA arrays

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
