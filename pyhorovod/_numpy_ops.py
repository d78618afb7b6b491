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

The functions live in pyhorovod/_numpy_allreduce.py and pyhorovod/_numpy_exchange.py; what an accepted
object is, and how it becomes a pointer, a dtype, a device and a stream, is pyhorovod/_buffers.py. CUDA
arrays (objects with `__cuda_array_interface__`) go to pyhorovod/_cuda_arrays.py.
"""
from pyhorovod._buffers import dtype_code  # noqa: F401 (part of this module's interface)
from pyhorovod._numpy_allreduce import (  # noqa: F401
    allreduce, allreduce_, allreduce_async, allreduce_async_, grouped_allreduce, grouped_allreduce_,
    grouped_allreduce_async, grouped_allreduce_async_)
from pyhorovod._numpy_exchange import (  # noqa: F401
    allgather, allgather_async, alltoall, alltoall_async, broadcast, broadcast_, broadcast_async, broadcast_async_,
    reducescatter, reducescatter_async)
