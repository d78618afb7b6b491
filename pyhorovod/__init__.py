"""pyhorovod: Horovod-style data-parallel collectives with a C++ pipelined-ring core.

The framework-free API works on numpy arrays and on any C-contiguous buffer-protocol object (bytearray,
array.array, memoryview), with the names, keywords and defaults of ``horovod.torch``::

    import numpy as np
    import pyhorovod as hvd

    hvd.init()
    total = hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum)

Supported element types: uint8, int8, int16, int32, int64, float16, bfloat16 (``ml_dtypes.bfloat16``
arrays, or uint16 bit patterns with ``dtype="bfloat16"``), float32, float64 and bool.

Reduction operations are the module constants ``Sum``, ``Average``, ``Min``, ``Max``, ``Product`` and
``Adasum`` (plain integers, listed below). PyTorch users import :mod:`pyhorovod.torch` instead.

What differs from ``horovod.torch`` here: no ``compression=`` keyword (a torch-layer feature), a
``dtype=`` keyword for bfloat16 bit patterns, a ``timeout=`` keyword on every collective, and Adasum
also at world sizes that are not a power of two. ``root_rank`` is a global rank everywhere, also on a
process set, as in Horovod.
"""
from typing import Any, Optional, Sequence, Union

from pyhorovod import _api, _core, _logging, basics, process_sets as _process_sets
from pyhorovod._api import Adasum, Average, Max, Min, Product, Sum, poll, synchronize
from pyhorovod._numpy_ops import (
    allgather, allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
    alltoall_async, broadcast, broadcast_, broadcast_async, broadcast_async_, grouped_allreduce,
    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_, reducescatter, reducescatter_async)
from pyhorovod.basics import (
    cross_rank, cross_size, is_homogeneous, is_initialized, local_rank, local_size, rank, rank_source,
    shutdown, size)
from pyhorovod._version import __version__
from pyhorovod.errors import HorovodInternalError, HorovodTimeoutError
from pyhorovod.errors import translated as _translated
from pyhorovod.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

_logging.set_up()  # the NullHandler on "pyhorovod", and HOROVOD_LOG_LEVEL's level (pyhorovod/_logging.py)


def init(comm: Union[None, Sequence[int], Any] = None, process_sets: Union[None, str, Sequence] = None) -> None:
    """Joins the job: finds this process's rank, meets the other ranks and starts the engine.

    The rank and size come from the first launcher whose variables are set (pyhorovod run, Horovod's
    names, torchrun, Open MPI, PMI, Slurm; none: a job of one process). Every rank of the job must call
    it. Calling it again is harmless; after :func:`shutdown` it starts afresh.

    Args:
        comm: the ranks that form the job, when not all launched processes do: a list of launched ranks
            (the new rank is the position in the list) or an mpi4py communicator (its members, with its
            ranks). Call ``init`` on the members only; disjoint lists make independent jobs side by side.
        process_sets: :class:`ProcessSet` objects (or rank lists) to register, with ids 1, 2, ... in
            list order -- the same list on every rank -- or ``"dynamic"`` to allow
            :func:`add_process_set` later (as ``HOROVOD_DYNAMIC_PROCESS_SETS=1``).

    Raises:
        ValueError: a bad argument or environment variable, or a process forked from a rank trying to
            rejoin its parent's job.
        HorovodInternalError: the ranks could not meet or connect (within
            ``PYHOROVOD_CONNECT_TIMEOUT_SECONDS``).
    """
    if basics.is_initialized():
        return
    dynamic = isinstance(process_sets, str)
    if dynamic and process_sets != "dynamic":
        raise ValueError(f"process_sets={process_sets!r}: pass a list of ProcessSet or 'dynamic'")
    static = [] if dynamic else _process_sets.as_process_sets(process_sets)
    static = _process_sets._bind_to_job(static, comm, basics.launched_size())
    basics.init(process_sets=static, dynamic_process_sets=dynamic, comm=comm)
    _process_sets._on_init(static)


def barrier(process_set: ProcessSet = global_process_set, timeout: Optional[float] = None) -> None:
    """Blocks until every rank of the process set has called it.

    Args:
        process_set: the ranks that wait for each other (default: all).
        timeout: seconds to wait (default ``PYHOROVOD_TIMEOUT_SECONDS``); Horovod has no such keyword.

    Raises:
        HorovodTimeoutError: not every rank arrived in time.
        HorovodInternalError: a peer failed.
    """
    _api.barrier(_process_sets.resolve(process_set).process_set_id, timeout=timeout)


def join(device: int = -1, timeout: Optional[float] = None) -> int:
    """Tells the other ranks that this one has no more data, and waits until every rank has joined.

    For uneven inputs: while a rank has joined, the others' allreduces go on without it, and it
    contributes the op's identity (zero for Sum and Average, which still divides by the full size; the
    largest value for Min, and so on -- Horovod contributes zeros for every op).

    Args:
        device: accepted for Horovod's signature (the device of the zero tensors there); unused.
        timeout: seconds to wait (default ``PYHOROVOD_TIMEOUT_SECONDS``).

    Returns:
        The rank that joined last.
    """
    return _api.join(device, timeout=timeout)


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing a timeline of the engine's activity (negotiation, queueing, transfers per tensor).

    The file is in Chrome's trace format (open it in chrome://tracing or Perfetto). The variable
    ``HOROVOD_TIMELINE`` starts one at :func:`init` instead.

    Args:
        file_path: the file to write.
        mark_cycles: also mark each negotiation cycle of the engine.
    """
    with _translated():
        basics.engine().start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline() -> None:
    """Stops the timeline started by :func:`start_timeline` (or ``HOROVOD_TIMELINE``) and closes its file."""
    with _translated():
        basics.engine().stop_timeline()


def __getattr__(name):
    # pyhorovod.run is a module that is also Horovod's run(func, ...) (see pyhorovod/run.py); importing it
    # on first use, not here, keeps `python -m pyhorovod.run` from finding it imported already.
    if name == "run":
        import importlib
        return importlib.import_module("pyhorovod.run")
    raise AttributeError(f"module 'pyhorovod' has no attribute {name!r}")


def build_info() -> dict:
    """What the extension was compiled with.

    Returns:
        A dict with the keys ``version``, ``compiler``, ``cxx_flags``, ``nccl`` (whether the GPU backend
        was built), ``nccl_version`` (NCCL's version code, 0 without it), ``cuda`` and ``shm`` (shared
        memory between ranks of one host). pyhorovod's own addition; Horovod has no such function.
    """
    return dict(_core.build_info())


# Horovod's capability queries, with Horovod's return types. pyhorovod's CPU transport is its own
# TCP/shared-memory core (reported by tcp_built); it links neither MPI nor Gloo (mpirun is only a
# launcher here), nor oneCCL, IBM DDL or ROCm, so those report False.
def tcp_built() -> bool:
    """True: the CPU collectives run over pyhorovod's own TCP and shared-memory transport."""
    return True


def mpi_built() -> bool:
    """False: pyhorovod links no MPI (``mpirun`` only starts the ranks; collectives never run over MPI)."""
    return False


def mpi_enabled() -> bool:
    """Whether the job's collectives run over MPI: never in pyhorovod (Horovod: True only when built
    with MPI and started by mpirun without Gloo)."""
    return False


def mpi_threads_supported() -> bool:
    """Horovod answers this only when MPI is enabled and raises ValueError otherwise (also under Horovod
    with Gloo); pyhorovod never enables MPI, so it always raises ValueError. A script that wants mpi4py
    next to pyhorovod initialises MPI itself (MPI.Init_thread)."""
    raise ValueError("pyhorovod does not run its collectives over MPI (mpi_enabled() is False), so MPI "
                     "thread support is not defined; use mpi4py's MPI.Query_thread() for your own MPI use")


def gloo_built() -> bool:
    """False: pyhorovod does not link Gloo (its own controller and transport take Gloo's place)."""
    return False


def gloo_enabled() -> bool:
    """False: Gloo is never used, also under ``pyhorovod run --gloo`` (which means pyhorovod's launcher)."""
    return False


def nccl_built() -> int:
    """The NCCL version the GPU backend was compiled against, or 0 without NCCL.

    Returns:
        NCCL's version code, as Horovod answers (e.g. 22807 for 2.28.7, so that scripts can compare it
        with a number such as 2700), or 0 when the GPU backend was not built.
    """
    return int(build_info().get("nccl_version", 0))


def cuda_built() -> bool:
    """Whether the GPU backend (CUDA tensors through NCCL) was compiled in."""
    return bool(build_info().get("cuda", False))


def rocm_built() -> bool:
    """False: there is no ROCm backend."""
    return False


def ddl_built() -> bool:
    """False: IBM DDL is not supported."""
    return False


def ccl_built() -> bool:
    """False: oneCCL is not supported."""
    return False


__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank",
    "cross_size", "is_homogeneous", "rank_source", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "allgather", "allgather_async", "broadcast", "broadcast_",
    "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "barrier", "join", "poll", "synchronize", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", "start_timeline", "stop_timeline", "build_info",
    "Sum", "Average", "Min", "Max", "Product", "Adasum", "HorovodInternalError", "HorovodTimeoutError",
    "tcp_built", "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled",
    "nccl_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built", "run",
]
