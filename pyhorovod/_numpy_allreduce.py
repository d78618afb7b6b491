"""allreduce and grouped_allreduce of the framework-free API (pyhorovod/_numpy_ops.py describes the API).

Numpy arrays and buffers are checked and read by pyhorovod/_buffers.py; CUDA arrays go to
pyhorovod/_cuda_arrays.py (one type check on the numpy path).
"""
from typing import Any, List, Optional, Sequence, Union

import numpy as np

from pyhorovod import _api, _core, _cuda_arrays, _sync_calls, basics, process_sets
from pyhorovod._api import Op
from pyhorovod._buffers import as_host_array as _as_array, dtype_code, host_pointer as _ptr, is_cuda_array, new_output
from pyhorovod._op_docs import documented as _documented
from pyhorovod.process_sets import ProcessSet, global_process_set


def _allreduce_async(tensors, inplace, grouped, average, name, op, prescale, postscale, process_set, dtype,
                     timeout=None):
    if tensors and is_cuda_array(tensors[0]):
        return _cuda_arrays.allreduce_async(tensors, inplace, grouped, average, name, op, prescale, postscale,
                                            process_set, dtype, timeout)
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
        outs.append(arr if inplace else new_output(arr))
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


_prepared_get = _sync_calls.prepared.get
_ndarray = np.ndarray   # module globals: `np.ndarray` is a module attribute look-up on every call
_ALLREDUCE = _core.ALLREDUCE
# The prepared call taken last, after the arguments of its key: (name, op, prescale, postscale, inplace,
# call), one tuple so that a thread never sees one call's arguments with another's call. A loop of one
# blocking allreduce passes the very same objects every time, so comparing them by identity finds the
# call without building and hashing a key (about 0.1 us, a twentieth of a 4 B allreduce at 2 ranks).
# Objects that are identical are equal, so a match is always the call the key would have found.
_NO_CALL = (object(),) * 5 + (None,)
_last = _NO_CALL


def _forget_last():
    global _last
    _last = _NO_CALL


basics.on_shutdown(_forget_last)
basics.on_fork_child(_forget_last)


def _allreduce_sync(tensor, inplace, average, name, op, prescale, postscale, process_set, dtype, timeout):
    """allreduce/allreduce_ without a handle: the same checks, in the same order, as _allreduce_async,
    then one engine call (enqueue + wait, the GIL released once; see _api.run_sync). Per-call work is
    kept to what a lone small tensor needs: its latency is mostly this function. A numpy array with the
    default dtype/timeout/average/process set takes a prepared call (pyhorovod/_sync_calls.py) when one
    with the same name, op and scales was made before."""
    global _last
    key = None
    if (type(tensor) is _ndarray and dtype is None and timeout is None and average is None
            and process_set is global_process_set and type(prescale) is float and type(postscale) is float):
        last_name, last_op, last_prescale, last_postscale, last_inplace, call = _last
        if not (name is last_name and op is last_op and prescale is last_prescale
                and postscale is last_postscale and inplace is last_inplace):
            key = (_ALLREDUCE, name, op, prescale, postscale, inplace)   # _sync_calls.py says why these
            try:
                call = _prepared_get(key)
            except TypeError:  # an unhashable name or op: the full path says what is wrong with it
                key = call = None
            if call is not None:
                _last = (name, op, prescale, postscale, inplace, call)
        if call is not None:
            try:
                result = call(tensor)   # an unnamed call claims the synchronous name itself
            except BaseException as e:
                _sync_calls.reraise(e)
            if result is not None:   # None: the prepared call does not fit this array
                return result
            if key is None:   # found by identity: the full path below files a new call under this key
                key = (_ALLREDUCE, name, op, prescale, postscale, inplace)
    if type(tensor) is not np.ndarray and is_cuda_array(tensor):
        return _api.synchronize(_cuda_arrays.allreduce_async([tensor], inplace, False, average, name, op,
                                                             prescale, postscale, process_set, dtype, timeout))
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
    code = dtype_code(arr, dtype, what)
    _api.check_reduce(op, code, prescale, postscale)
    out = arr if inplace else new_output(arr)
    _api.run_sync(_core.ALLREDUCE, name, code, arr.shape, arr, out, op, prescale, postscale, 0, ps_id, timeout)
    if key is not None and ps_id == 0:
        _sync_calls.prepare(key, _core.ALLREDUCE, code, arr, name, inplace, op, prescale, postscale)
        _last = _NO_CALL   # it may hold the call this one replaces
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
