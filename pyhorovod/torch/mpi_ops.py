"""horovod.torch.mpi_ops under pyhorovod's name: the collectives (with their autograd functions), the
queries and the reduction ops, for scripts that import them from that module path."""
from pyhorovod import (
    Adasum, Average, HorovodInternalError, Max, Min, Product, ProcessSet, Sum, add_process_set, ccl_built,
    cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, global_process_set, init,
    is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
    nccl_built, rank, remove_process_set, rocm_built, shutdown, size, start_timeline, stop_timeline)
from pyhorovod.torch.autograd import (
    HorovodAllgather, HorovodAllreduce, HorovodAlltoall, HorovodBroadcast, HorovodGroupedAllgather,
    HorovodGroupedAllreduce, HorovodGroupedReducescatter, HorovodReducescatter, allgather, allreduce,
    alltoall, broadcast, grouped_allgather, grouped_allreduce, grouped_reducescatter, reducescatter)
from pyhorovod.torch.ops import (
    allgather_async, allreduce_, allreduce_async, allreduce_async_, alltoall_async, barrier, broadcast_,
    broadcast_async, broadcast_async_, grouped_allgather_async, grouped_allreduce_, grouped_allreduce_async,
    grouped_allreduce_async_, grouped_reducescatter_async, join, poll, reducescatter_async, synchronize)
from pyhorovod.torch.sparse import sparse_allreduce_async
