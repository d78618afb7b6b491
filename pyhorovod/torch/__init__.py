"""pyhorovod.torch: a drop-in replacement for horovod.torch.

Change only the import line of a Horovod script::

    import pyhorovod.torch as hvd          # instead of: import horovod.torch as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

Same names, arguments, semantics and exception types as horovod.torch (HorovodInternalError for failed
collectives, ValueError for bad arguments); Horovod's module paths exist too (pyhorovod.torch.mpi_ops,
.compression, .functions, .sync_batch_norm). What differs is documented where it differs; in short:
op=Adasum runs on CPU tensors only (ValueError on CUDA tensors) and at any number of ranks;
SyncBatchNorm also works on CPU tensors; DistributedOptimizer can apply the linear/sqrt LR scaling rule
with warmup itself (lr_scaling=, off by default) and measure the gradient noise scale
(measure_noise_scale=); Compression.bf16 and PowerSGD (low-rank) compression are extra; scaled_lr,
scale_factor and LinearWarmup are exported here too.
"""
from pyhorovod import (
    Adasum, Average, HorovodInternalError, HorovodTimeoutError, Max, Min, Product, ProcessSet, Sum,
    add_process_set, build_info, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
    gloo_enabled, global_process_set, init, is_homogeneous, is_initialized, local_rank, local_size,
    mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, remove_process_set, rocm_built,
    shutdown, size, start_timeline, stop_timeline, tcp_built)
from pyhorovod.scaling.lr import LinearWarmup, scale_factor, scaled_lr
from pyhorovod.torch.autograd import (
    allgather, allreduce, alltoall, broadcast, grouped_allgather, grouped_allreduce, grouped_reducescatter,
    reducescatter)
from pyhorovod.torch.compression import Compression
from pyhorovod.torch.functions import (
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from pyhorovod.torch.ops import (
    allgather_async, allreduce_, allreduce_async, allreduce_async_, alltoall_async, barrier, broadcast_,
    broadcast_async, broadcast_async_, grouped_allgather_async, grouped_allreduce_, grouped_allreduce_async,
    grouped_allreduce_async_, grouped_reducescatter_async, join, poll, reducescatter_async, synchronize)
from pyhorovod.torch.sparse import sparse_allreduce_async
from pyhorovod.torch.optimizer import DistributedOptimizer
from pyhorovod.torch.powersgd import PowerSGD
from pyhorovod.torch.sync_batch_norm import SyncBatchNorm
from pyhorovod.torch import mpi_ops  # noqa: F401 -- hvd.mpi_ops, as in horovod.torch
from pyhorovod.torch import elastic  # noqa: F401 -- hvd.elastic, as in horovod.torch


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank", "local_size", "cross_rank",
    "cross_size", "is_homogeneous", "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built",
    "gloo_enabled", "nccl_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built", "tcp_built",
    "build_info", "HorovodInternalError", "HorovodTimeoutError", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", "start_timeline", "stop_timeline",
    "Sum", "Average", "Min", "Max", "Product", "Adasum",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "allgather",
    "allgather_async", "grouped_allgather", "grouped_allgather_async", "broadcast", "broadcast_",
    "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async", "sparse_allreduce_async",
    "barrier", "join", "poll", "synchronize", "Compression", "PowerSGD", "DistributedOptimizer", "SyncBatchNorm",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object",
    "scaled_lr", "scale_factor", "LinearWarmup",
]
