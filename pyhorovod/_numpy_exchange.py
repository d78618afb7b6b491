"""allgather, broadcast, alltoall and reducescatter of the framework-free API (pyhorovod/_numpy_ops.py
describes the API).

Each collective is one internal function run either by _api.submit (the _async forms: a handle) or by
_api.submit_sync (the blocking forms); CUDA arrays go to pyhorovod/_cuda_arrays.py instead.
"""
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from pyhorovod import _api, _core, _cuda_arrays, _sync_calls, basics, process_sets
from pyhorovod._api import Average, Op
from pyhorovod._buffers import as_host_array as _as_array, dtype_code, host_pointer as _ptr, is_cuda_array, new_output
from pyhorovod._collective_shapes import at_least_1d, check_splits, reducescatter_shape
from pyhorovod._op_docs import documented as _documented
from pyhorovod.process_sets import ProcessSet, global_process_set

# The blocking forms take a prepared call (pyhorovod/_sync_calls.py) when the tensor is a numpy array in
# the global set with the default dtype and timeout. Module globals, because attribute look-ups such as
# `_core.ALLGATHER` cost on every call.
_lookup = _sync_calls.lookup
_ndarray = np.ndarray
_ALLGATHER, _BROADCAST, _ALLTOALL, _REDUCESCATTER = _core.ALLGATHER, _core.BROADCAST, _core.ALLTOALL, \
    _core.REDUCESCATTER


def _from_result(result, dtype: np.dtype) -> np.ndarray:
    """The engine-owned output bytes of allgather/alltoall, viewed as `dtype` in the result's shape."""
    shape = tuple(result.output_shape)
    if result.output is None:
        return np.empty(shape, dtype=dtype)
    return np.asarray(result.output).view(dtype).reshape(shape)


def _on_device(handle: int, run):
    """A CUDA array's request, started by pyhorovod/_cuda_arrays.py: waited for when `run` blocks."""
    return _api.synchronize(handle) if run is _api.submit_sync else handle


def allgather_async(tensor: Any, name: Optional[str] = None, process_set: ProcessSet = global_process_set,
                    dtype: Union[None, str, int, np.dtype] = None, timeout: Optional[float] = None) -> int:
    """Starts :func:`allgather` and returns a handle; :func:`synchronize` returns the gathered array."""
    return _allgather(tensor, name, process_set, dtype, timeout, _api.submit)


def _allgather(tensor, name, process_set, dtype, timeout, run):
    """run: _api.submit (returns a handle) or _api.submit_sync (waits, returns the result)."""
    if is_cuda_array(tensor):
        return _on_device(_cuda_arrays.allgather_async(tensor, name, process_set, dtype, timeout), run)
    ps = process_sets.resolve(process_set)
    arr = _as_array(tensor, "allgather", writable=False)
    at_least_1d(arr.shape, "allgather")
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
    key = None
    if type(tensor) is _ndarray and dtype is None and timeout is None and process_set is global_process_set:
        result, key = _lookup((_ALLGATHER, name), tensor)   # a prepared call (pyhorovod/_sync_calls.py)
        if result is not None:
            return result
    result = _allgather(tensor, name, process_set, dtype, timeout, _api.submit_sync)
    if key is not None and process_set.process_set_id == 0:
        _sync_calls.prepare(key, _core.ALLGATHER, dtype_code(tensor, None, "allgather"), tensor, name)
    return result


def _broadcast_async(tensor, root_rank, name, process_set, dtype, inplace, timeout=None, run=_api.submit):
    if is_cuda_array(tensor):
        return _on_device(_cuda_arrays.broadcast_async(tensor, root_rank, name, process_set, dtype, inplace,
                                                       timeout), run)
    what = "broadcast_" if inplace else "broadcast"
    ps = process_sets.resolve(process_set)
    timeout = _api.check_timeout(timeout)
    root = _api.check_root(root_rank, ps.ranks)
    arr = _as_array(tensor, what, writable=inplace)
    code = dtype_code(arr, dtype, what)
    out = arr if inplace else new_output(arr)
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
    return _broadcast_sync(tensor, root_rank, name, process_set, dtype, False, timeout)


def broadcast_(tensor: Any, root_rank: int, name: Optional[str] = None,
               process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
               timeout: Optional[float] = None) -> Any:
    """As :func:`broadcast`, writing the root's values into ``tensor``; returns ``tensor``."""
    return _broadcast_sync(tensor, root_rank, name, process_set, dtype, True, timeout)


def _broadcast_sync(tensor, root_rank, name, process_set, dtype, inplace, timeout):
    """broadcast/broadcast_: a numpy array in the global set with the default dtype and timeout takes a
    prepared call (pyhorovod/_sync_calls.py) when one with the same name, root and form was made before;
    everything else, and the first such call, the full path (which then files the prepared call)."""
    key = None
    if (type(tensor) is _ndarray and dtype is None and timeout is None and process_set is global_process_set
            and type(root_rank) is int):
        result, key = _lookup((_BROADCAST, name, root_rank, inplace), tensor)
        if result is not None:
            return result
    result = _broadcast_async(tensor, root_rank, name, process_set, dtype, inplace, timeout, _api.submit_sync)
    if key is not None and process_set.process_set_id == 0:
        _sync_calls.prepare(key, _core.BROADCAST, dtype_code(tensor, None, "broadcast"), tensor, name, inplace,
                            root=root_rank)
    return result


def alltoall_async(tensor: Any, splits: Optional[Sequence[int]] = None, name: Optional[str] = None,
                   process_set: ProcessSet = global_process_set, dtype: Union[None, str, int, np.dtype] = None,
                   timeout: Optional[float] = None) -> int:
    """Starts :func:`alltoall` and returns a handle; :func:`synchronize` returns what alltoall returns."""
    return _alltoall(tensor, splits, name, process_set, dtype, timeout, _api.submit)


def _alltoall(tensor, splits, name, process_set, dtype, timeout, run):
    if is_cuda_array(tensor):
        return _on_device(_cuda_arrays.alltoall_async(tensor, splits, name, process_set, dtype, timeout), run)
    ps = process_sets.resolve(process_set)
    arr = _as_array(tensor, "alltoall", writable=False)
    at_least_1d(arr.shape, "alltoall")
    code = dtype_code(arr, dtype, "alltoall")
    values = check_splits(splits, arr.shape[0], len(ps.ranks))
    # Equal parts go as no splits (the engine splits evenly): a blocking call then takes the synchronous
    # path, and an unnamed one the same reusable name as its prepared call (pyhorovod/_sync_calls.py).
    op = Op(_core.ALLTOALL, code, arr.shape, _ptr(arr), 0, name=name or "",
            splits=() if splits is None else tuple(values),
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
    key = None
    if type(tensor) is _ndarray and dtype is None and timeout is None and process_set is global_process_set:
        if splits is not None:
            return _alltoall_with_splits(tensor, splits, name)
        result, key = _lookup((_ALLTOALL, name), tensor)   # a prepared call (pyhorovod/_sync_calls.py)
        if result is not None:
            return result
    result = _alltoall(tensor, splits, name, process_set, dtype, timeout, _api.submit_sync)
    if key is not None and process_set.process_set_id == 0:
        _sync_calls.prepare(key, _core.ALLTOALL, dtype_code(tensor, None, "alltoall"), tensor, name)
    return result


def _alltoall_with_splits(arr: np.ndarray, splits, name):
    """A blocking alltoall with splits of a numpy array in the global set, default dtype and timeout: the
    same checks as _alltoall's, then the engine's binding builds the output and the received splits."""
    arr = _as_array(arr, "alltoall", writable=False)
    at_least_1d(arr.shape, "alltoall")
    code = dtype_code(arr, None, "alltoall")
    values = check_splits(splits, arr.shape[0], len(process_sets.resolve(global_process_set).ranks))
    return _api.run_alltoall_sync(name or "", code, arr, values, 0, 0.0)


def reducescatter_async(tensor: Any, name: Optional[str] = None, op: int = Average,
                        process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                        postscale_factor: float = 1.0, dtype: Union[None, str, int, np.dtype] = None,
                        timeout: Optional[float] = None) -> int:
    """Starts :func:`reducescatter` and returns a handle; :func:`synchronize` returns this rank's block."""
    return _reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor, dtype, timeout,
                          _api.submit)


def _reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor, dtype, timeout, run):
    if is_cuda_array(tensor):
        return _on_device(_cuda_arrays.reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                                           postscale_factor, dtype, timeout), run)
    ps = process_sets.resolve(process_set)
    arr = _as_array(tensor, "reducescatter", writable=False)
    at_least_1d(arr.shape, "reducescatter")
    code = dtype_code(arr, dtype, "reducescatter")
    op = _api.resolve_op(op, None)
    _api.check_reduce(op, code, float(prescale_factor), float(postscale_factor))
    out = new_output(arr, reducescatter_shape(arr.shape, ps.ranks, basics.rank()))
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
    key = None
    if (type(tensor) is _ndarray and dtype is None and timeout is None and process_set is global_process_set
            and type(prescale_factor) is float and type(postscale_factor) is float):
        result, key = _lookup((_REDUCESCATTER, name, op, prescale_factor, postscale_factor), tensor)
        if result is not None:
            return result
    result = _reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor, dtype, timeout,
                            _api.submit_sync)
    if key is not None and process_set.process_set_id == 0:
        _sync_calls.prepare(key, _core.REDUCESCATTER, dtype_code(tensor, None, "reducescatter"), tensor, name,
                            reduce_op=_api.resolve_op(op, None), prescale=prescale_factor,
                            postscale=postscale_factor, out_shape=result.shape)
    return result
