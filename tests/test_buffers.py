"""pyhorovod/_buffers.py (the one adapter from accepted objects to pointer, bytes, dtype, device, stream)
and the numpy front's hand-over of CUDA arrays to pyhorovod/_cuda_arrays.py. No GPU needed: a CUDA array
is faked by its interface."""
import numpy as np
import pytest

import pyhorovod as hvd
from pyhorovod import _api, _buffers, _core, _cuda_arrays


class FakeCudaArray:
    def __init__(self, shape=(2, 3), typestr="<f4", strides=None, stream=7, device_id=1):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0x1000, False),
                                         "strides": strides, "version": 3, "stream": stream}
        self.device = type("Device", (), {"id": device_id})()


def test_host_array_becomes_its_pointer_bytes_and_dtype():
    arr = np.arange(6, dtype=np.float32)
    b = _buffers.adapt(arr, "op")
    assert (b.ptr, b.nbytes, b.code, b.device, b.stream) == (arr.ctypes.data, 24, _core.FLOAT32, -1, 0)
    assert _buffers.adapt(bytearray(5), "op").code == _core.UINT8


def test_cuda_array_becomes_its_pointer_device_and_stream():
    b = _buffers.adapt(FakeCudaArray(), "op")
    assert (b.ptr, b.nbytes, b.code, b.device, b.stream, b.shape) == (0x1000, 24, _core.FLOAT32, 1, 7, (2, 3))


def test_refusals_name_the_op():
    with pytest.raises(ValueError, match="allgather: the CUDA array is not C-contiguous"):
        _buffers.adapt(FakeCudaArray(strides=(4, 8)), "allgather")
    with pytest.raises(ValueError, match="allreduce_: the array is read-only"):
        _buffers.adapt(np.frombuffer(b"abcd", np.uint8), "allreduce_", writable=True)
    with pytest.raises(ValueError, match="broadcast: expected a numpy array"):
        _buffers.adapt(object(), "broadcast")
    with pytest.raises(ValueError, match="op: unsupported dtype complex64"):
        _buffers.adapt(np.zeros(2, np.complex64), "op")


@pytest.mark.parametrize("call,target,waits", [
    (lambda x: hvd.allreduce(x), "allreduce_async", True),
    (lambda x: hvd.allreduce_(x), "allreduce_async", True),
    (lambda x: hvd.allreduce_async(x), "allreduce_async", False),
    (lambda x: hvd.grouped_allreduce([x, x]), "allreduce_async", True),
    (lambda x: hvd.grouped_allreduce_async_([x]), "allreduce_async", False),
    (lambda x: hvd.allgather(x), "allgather_async", True),
    (lambda x: hvd.allgather_async(x), "allgather_async", False),
    (lambda x: hvd.broadcast(x, 0), "broadcast_async", True),
    (lambda x: hvd.broadcast_async_(x, 0), "broadcast_async", False),
    (lambda x: hvd.alltoall(x), "alltoall_async", True),
    (lambda x: hvd.alltoall_async(x, [2]), "alltoall_async", False),
    (lambda x: hvd.reducescatter(x), "reducescatter_async", True),
    (lambda x: hvd.reducescatter_async(x), "reducescatter_async", False),
])
def test_cuda_arrays_go_to_the_cuda_front(monkeypatch, call, target, waits):
    calls, synced = [], []
    monkeypatch.setattr(_cuda_arrays, target, lambda *a: calls.append(a) or 41)
    monkeypatch.setattr(_api, "synchronize", lambda h: synced.append(h) or "result")
    x = FakeCudaArray()
    got = call(x)
    assert len(calls) == 1 and (x in calls[0] or x in calls[0][0])
    assert (got, synced) == (("result", [41]) if waits else (41, []))
