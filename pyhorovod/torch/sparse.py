"""Allreduce of sparse COO tensors (DistributedOptimizer's sparse gradients, unless sparse_as_dense=True):
each rank's indices and values are allgathered, and the sum is the coalesced concatenation."""
from typing import Callable, Optional

import torch

from pyhorovod import _api
from pyhorovod.process_sets import ProcessSet, global_process_set
from pyhorovod.torch import _convert as cv
from pyhorovod.torch.ops import _name, allgather_async, synchronize


def sparse_allreduce_async(tensor: torch.Tensor, name: Optional[str], op: int,
                           process_set: ProcessSet = global_process_set) -> Callable[[], torch.Tensor]:
    """Starts an allreduce of a sparse COO tensor, by allgathering its indices and values.

    Used by :func:`DistributedOptimizer` for sparse gradients (unless ``sparse_as_dense=True``).
    Duplicate indices are summed when the result is coalesced.

    Args:
        tensor: a sparse COO tensor, the same dense size on every rank.
        name: the base name of the two allgathers.
        op: :data:`Average` or :data:`Sum`.
        process_set: the ranks that take part (default: all).

    Returns:
        A function without arguments that waits and returns the reduced, coalesced sparse tensor (a
        callable, not a handle, as in Horovod).

    Raises:
        ValueError: another op.
    """
    if op not in (_api.Average, _api.Sum):
        raise ValueError("sparse allreduce supports only op=Average or Sum")
    ps = cv.process_set(process_set)
    t = tensor.coalesce()
    # allgather concatenates along dim 0, so the [ndim, nnz] indices travel transposed.
    indices = allgather_async(t.indices().t().contiguous(), name=_name(name and f"{name}.indices"),
                              process_set=ps)
    values = allgather_async(t.values().contiguous(), name=_name(name and f"{name}.values"), process_set=ps)

    def handle():
        v = synchronize(values)
        i = synchronize(indices)
        if op == _api.Average:
            v = v / cv.set_size(ps)
        return torch.sparse_coo_tensor(i.t(), v, t.size()).coalesce()

    return handle
