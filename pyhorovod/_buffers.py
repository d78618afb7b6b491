"""The one buffer adapter: any object the framework-free API accepts -> what the engine needs of it.

An accepted object is a numpy array, any C-contiguous buffer-protocol object (bytearray, array.array,
memoryview, bytes), or a CUDA array (CuPy, or anything exposing `__cuda_array_interface__`, CAI: a device
pointer, shape, typestr and strides, see numba's specification). `adapt()` turns each into a `Buffer`:
(pointer, bytes, dtype code, device, stream), plus the shape and numpy dtype the outputs are made with.
torch tensors take their own path (pyhorovod/torch), since torch knows its tensors' devices and streams.

For a CUDA array:
- device: the array's `.device.id` (CuPy) or `.device.index` (torch), else CuPy's pointer attributes.
- stream: the CAI's "stream" entry (v3: the producer's cudaStream_t; 1 = legacy default, 2 = per-thread
  default, both valid cudaStream_t values as they are) or CuPy's current stream; the backend orders the
  collective after the work queued on it.

Host buffers are checked here too (C-contiguous; writable for in-place ops), so every front shares the
error messages.
"""
import math
from typing import Optional, Tuple

import numpy as np

from pyhorovod import _api, _core

HOST = -1  # the device of a host buffer, as the engine's requests say it

_KIND_CODES = {("u", 1): _core.UINT8, ("i", 1): _core.INT8, ("i", 2): _core.INT16, ("i", 4): _core.INT32,
               ("i", 8): _core.INT64, ("f", 2): _core.FLOAT16, ("f", 4): _core.FLOAT32,
               ("f", 8): _core.FLOAT64, ("b", 1): _core.BOOL}


def is_cuda_array(x) -> bool:
    return not isinstance(x, np.ndarray) and hasattr(x, "__cuda_array_interface__")


def as_host_array(tensor, what: str, writable: bool) -> np.ndarray:
    """`tensor` as a numpy array sharing its memory (raises ValueError when it cannot be one)."""
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


# numpy dtype -> _core code, for the dtypes seen so far: _own_code costs about 2 us (dtype.name is
# Python code in numpy), a tenth of an asynchronous 4 B request. A dtype object is hashable and immutable.
_CODES_SEEN = {}


def dtype_code(arr: np.ndarray, dtype=None, what: str = "op") -> int:
    """The _core dtype code of `arr`, or of the explicit `dtype` (a name, a _core code or a numpy dtype)
    which must have the array's item size and either match the array's type or reinterpret raw unsigned
    bits (uint16 holding bfloat16)."""
    if dtype is None:
        own = _CODES_SEEN.get(arr.dtype)
        if own is not None:
            return own
    own = _own_code(arr.dtype)
    if dtype is None:
        if own is None:
            raise ValueError(f"{what}: unsupported dtype {arr.dtype} (supported: "
                             f"{', '.join(_api.DTYPE_NAMES)}; pass dtype='bfloat16' or 'float16' to reduce "
                             f"16-bit float bit patterns held in a uint16 array)")
        _CODES_SEEN[arr.dtype] = own
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


_POOLED_BYTES = _core.POOLED_OUTPUT_BYTES


def new_output(arr: np.ndarray, shape=None) -> np.ndarray:
    """A new C-contiguous array of arr's dtype (and shape, unless `shape` is given) for the output of a
    collective on `arr`, contents unspecified. Large ones come from the engine's output pool (reused
    memory, placed like arr within its cache line): numpy maps each large array afresh and faults it in
    page by page, which cost an asynchronous 64 MiB allreduce at 2 ranks a third of its time."""
    if shape is None:
        shape, nbytes = arr.shape, arr.nbytes
    else:
        shape = tuple(shape)
        nbytes = arr.dtype.itemsize * math.prod(shape)
    if nbytes < _POOLED_BYTES:
        return np.empty(shape, dtype=arr.dtype)
    return _core.empty_output(arr.dtype, list(shape), host_pointer(arr))


def host_pointer(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


class Buffer:
    """What the engine needs of one accepted object. obj: the object itself (kept alive by the request);
    device: HOST or a CUDA device ordinal; stream: the cudaStream_t to order after (0 on the host)."""

    __slots__ = ("obj", "shape", "np_dtype", "code", "ptr", "nbytes", "device", "stream")

    def __init__(self, obj, shape: Tuple[int, ...], np_dtype: np.dtype, code: int, ptr: int, device: int,
                 stream: int):
        self.obj, self.shape, self.np_dtype, self.code, self.ptr = obj, shape, np_dtype, code, ptr
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize
        self.device, self.stream = device, stream


def adapt(obj, what: str, writable: bool = False, dtype=None) -> Buffer:
    """The Buffer of `obj` (raises ValueError when the object is not accepted)."""
    if is_cuda_array(obj):
        return _cuda_buffer(obj, what, dtype)
    arr = as_host_array(obj, what, writable)
    return Buffer(arr, arr.shape, arr.dtype, dtype_code(arr, dtype, what), host_pointer(arr), HOST, 0)


def _cuda_buffer(x, what: str, dtype) -> Buffer:
    cai = x.__cuda_array_interface__
    shape = tuple(int(s) for s in cai["shape"])
    np_dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is not None:
        expected, step = [], np_dtype.itemsize
        for s in reversed(shape):
            expected.append(step)
            step *= s
        if tuple(strides) != tuple(reversed(expected)) and int(np.prod(shape)) > 1:
            raise ValueError(f"{what}: the CUDA array is not C-contiguous (copy it first)")
    ptr = int(cai["data"][0])
    code = dtype_code(np.empty(0, np_dtype), dtype, what)
    stream = cai.get("stream")
    return Buffer(x, shape, np_dtype, code, ptr, _device_of(x, ptr), int(stream) if stream else current_stream())


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


def current_stream() -> int:
    """CuPy's current stream on this thread (0, the legacy default, without CuPy)."""
    try:
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)
    except Exception:
        return 0
