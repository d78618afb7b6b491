"""pyhorovod: Horovod-style data-parallel collectives with a C++ pipelined-ring core.

The framework-free API (numpy arrays and buffer-protocol objects) mirrors horovod.torch:

    import pyhorovod as hvd
    hvd.init()
    total = hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum)

PyTorch users import pyhorovod.torch instead. Differences from Horovod are noted in the docstrings
(pyhorovod/_numpy_ops.py): no compression= here, a dtype= keyword for bfloat16 bit patterns, Adasum
also at world sizes that are not a power of two. root_rank is a global rank everywhere, also on a process
set, as in Horovod.
"""
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



def init(comm=None, process_sets=None) -> None:
    """Joins the job (rank discovery: README "Environment variables"). Calling it again is harmless;
    after shutdown() it starts afresh. comm: the launched ranks that form the job, as a list (ranks of
    the launched job; rank = position in the list) or an mpi4py communicator (its own ranks), as with
    Horovod (pyhorovod/_comm.py); call it on the members only. process_sets: ProcessSet objects (or rank
    lists) registered statically with ids 1, 2, ... (the same list on every rank), or "dynamic" to allow
    add_process_set() (like HOROVOD_DYNAMIC_PROCESS_SETS=1)."""
    if basics.is_initialized():
        return
    dynamic = isinstance(process_sets, str)
    if dynamic and process_sets != "dynamic":
        raise ValueError(f"process_sets={process_sets!r}: pass a list of ProcessSet or 'dynamic'")
    static = [] if dynamic else _process_sets.as_process_sets(process_sets)
    static = _process_sets._bind_to_job(static, comm, basics.launched_size())
    basics.init(process_sets=static, dynamic_process_sets=dynamic, comm=comm)
    _process_sets._on_init(static)


def barrier(process_set=global_process_set, timeout=None) -> None:
    """Blocks until every rank of the set has reached it (timeout=: seconds, default
    PYHOROVOD_TIMEOUT_SECONDS)."""
    _api.barrier(_process_sets.resolve(process_set).process_set_id, timeout=timeout)


def join(device: int = -1, timeout=None) -> int:
    """Signals that this rank has no more data (uneven inputs); returns the rank that joined last."""
    return _api.join(device, timeout=timeout)


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing a Chrome-trace timeline of the engine's activity to file_path (as Horovod)."""
    with _translated():
        basics.engine().start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline() -> None:
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
    """What was compiled: {"version", "compiler", "cxx_flags", "nccl", "nccl_version", "cuda", "shm"}."""
    return dict(_core.build_info())


# Horovod's capability queries, with Horovod's return types. pyhorovod's CPU transport is its own
# TCP/shared-memory core (reported by tcp_built); it links neither MPI nor Gloo (mpirun is only a
# launcher here), nor oneCCL, IBM DDL or ROCm, so those report False.
def tcp_built() -> bool:
    return True


def mpi_built() -> bool:
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
    return False


def gloo_enabled() -> bool:
    return False


def nccl_built() -> int:
    """The NCCL version the GPU backend was compiled against, as NCCL_VERSION_CODE (e.g. 22807 for
    2.28.7; scripts compare it with e.g. 2700), or 0 when it was built without NCCL -- as Horovod."""
    return int(build_info().get("nccl_version", 0))


def cuda_built() -> bool:
    return bool(build_info().get("cuda", False))


def rocm_built() -> bool:
    return False


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
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
