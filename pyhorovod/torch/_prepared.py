"""Blocking torch collectives through prepared calls (pyhorovod/_sync_calls.py).

A contiguous CPU tensor of a dtype numpy also has is, for the engine, the same buffer as its numpy view
(`tensor.numpy()` shares the memory), and the same arguments make the same engine request whichever API
made it. So a blocking allreduce(_), broadcast(_), allgather, alltoall (without splits) or reducescatter on such
a tensor looks up the prepared call the numpy API files, under the same key, and files one after its own
full path succeeded.
What takes this way and why:
- unnamed calls too, as in the numpy API: both ways use the same reusable synchronous name;
- no gradient: a tensor that requires one goes through autograd (pyhorovod/torch/autograd.py);
- the global set, no compression, average= unused, float scale factors (the numpy key's rules).
The cost this saves is the torch layer's own (autograd's Function, argument checks): a 4 B allreduce's
time falls to about the numpy API's. A blocking alltoall with splits (a list or tuple) on such a tensor takes
the numpy API's own way for it (Engine.alltoall_sync), which has no prepared call.
"""
import torch

from pyhorovod import _core, _numpy_exchange, _sync_calls, basics
from pyhorovod._buffers import dtype_code

# torch dtypes whose tensors have a numpy view (bfloat16 has none: it keeps its full path)
_VIEWABLE = frozenset((torch.float16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
                       torch.int64, torch.uint8, torch.bool))
_ALLREDUCE, _BROADCAST = _core.ALLREDUCE, _core.BROADCAST


_prepared_get = _sync_calls.prepared.get
# The last small tensor viewed, with what decided its view: (tensor, data_ptr, shape, dtype, view). A loop
# of blocking calls on one tensor takes the view again when the very same tensor still has the same
# memory, shape and dtype (its contiguity, device and gradient flag are checked on every call anyway):
# tensor.numpy() costs 0.7 us, a third of a 4 B allreduce's local work. Only tensors of at most
# _VIEW_MEMO_BYTES are remembered, since the view keeps its tensor alive until the next call with another.
_VIEW_MEMO_BYTES = 1 << 16
_last_view = (None, 0, None, None, None)


def _view(tensor):
    """The tensor's memory as a numpy array, or None when it has no such view (see above). Each check is
    the cheapest spelling torch offers (`is_cpu`, not `device.type`): this runs on every call."""
    global _last_view
    if (type(tensor) is not torch.Tensor or tensor.requires_grad or not tensor.is_cpu
            or not tensor.is_contiguous()):
        return None
    last, ptr, shape, dtype, arr = _last_view
    if tensor is last and tensor.data_ptr() == ptr and tensor.dtype is dtype and tensor.shape == shape:
        return arr
    if tensor.dtype not in _VIEWABLE:
        return None
    arr = tensor.numpy()
    if arr.nbytes <= _VIEW_MEMO_BYTES:
        _last_view = (tensor, tensor.data_ptr(), tensor.shape, tensor.dtype, arr)
    return arr


def _forget_view():
    global _last_view
    _last_view = (None, 0, None, None, None)


basics.on_shutdown(_forget_view)


# The key functions look at the arguments only; run() and file() check the tensor, once each.

def allreduce_key(tensor, name, op, prescale, postscale, inplace):
    """The prepared-call key of a torch allreduce, or None when the arguments cannot make one."""
    if type(prescale) is float and type(postscale) is float:
        return (_ALLREDUCE, name, op, prescale, postscale, inplace)
    return None


def broadcast_key(tensor, root_rank, name, inplace):
    """The prepared-call key of a torch broadcast, or None when the arguments cannot make one."""
    if type(root_rank) is int:
        return (_BROADCAST, name, root_rank, inplace)
    return None


def exchange_key(tensor, op_type, name, *args):
    """The prepared-call key of a torch allgather, alltoall (no splits) or reducescatter (args: op,
    prescale, postscale), or None when the arguments cannot make one."""
    if all(type(a) is float for a in args[1:]):
        return (op_type, name) + args
    return None


def run(key, tensor):
    """The result of the prepared call filed under `key` on `tensor` (a new tensor; `tensor` itself in
    place), or None: none filed, no numpy view, or it does not fit (the caller then takes its full path)."""
    if key is None:
        return None
    try:
        call = _prepared_get(key)
    except TypeError:  # an unhashable name or op: the full path says what is wrong with it
        return None
    if call is None:
        return None
    arr = _view(tensor)
    if arr is None:
        return None
    out = _sync_calls.run(call, arr)
    if out is None:
        return None
    return tensor if out is arr else torch.from_numpy(out)


def file(key, tensor, **request) -> None:
    """Files the prepared call for `key` after the full path ran `tensor` with these arguments (the
    keywords of _sync_calls.prepare: inplace, reduce_op, prescale, postscale, root, out_shape), when the
    tensor has a numpy view."""
    arr = None if key is None else _view(tensor)
    if arr is not None:
        _sync_calls.prepare(key, key[0], dtype_code(arr, None, "prepared call"), arr, key[1], **request)


def alltoall_with_splits(tensor, splits, name):
    """(output, received splits) as tensors of a blocking alltoall in the global set with list or tuple
    splits, through the tensor's numpy view; None when it has none (the caller then takes its full path)."""
    if type(splits) not in (list, tuple):
        return None
    arr = _view(tensor)
    if arr is None:
        return None
    out, received = _numpy_exchange._alltoall_with_splits(arr, splits, name)
    return torch.from_numpy(out), torch.from_numpy(received)
