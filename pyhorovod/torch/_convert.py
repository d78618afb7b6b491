"""Torch tensors <-> engine requests: dtype codes, argument checks, engine-owned outputs as tensors.

A contiguous CPU tensor is handed to the core by its data_ptr(), without a copy; a non-contiguous one is
first copied into a contiguous buffer (and, for in-place ops, copied back when the op completes).
"""

import torch

from pyhorovod import _api, _core, basics, process_sets

DTYPE_CODES = {
    torch.uint8: _core.UINT8, torch.int8: _core.INT8, torch.int16: _core.INT16, torch.int32: _core.INT32,
    torch.int64: _core.INT64, torch.float16: _core.FLOAT16, torch.bfloat16: _core.BFLOAT16,
    torch.float32: _core.FLOAT32, torch.float64: _core.FLOAT64, torch.bool: _core.BOOL,
}


def check_op(op):
    """ValueError unless op is one of hvd.Sum, Average, Min, Max, Product, Adasum."""
    if op not in _api.REDUCE_OPS:
        raise ValueError(f"op={op!r} is not a reduction op (use hvd.Sum, Average, Min, Max, Product or Adasum)")
    return op


def check_groups(groups):
    """DistributedOptimizer(groups=): None, a positive count, or lists of distinct parameters."""
    if groups is not None and not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
        raise ValueError(f"groups={groups!r}: expected a positive number of groups or a list of lists of "
                         f"parameters")
    seen = set()
    for group in groups if isinstance(groups, list) else ():
        for p in group:
            if not isinstance(p, torch.Tensor):
                raise ValueError("groups: every entry of every group must be a parameter (a torch.Tensor)")
            if id(p) in seen:
                raise ValueError("groups: a parameter is listed in more than one place")
            seen.add(id(p))


def resolve_op(op, average):
    """horovod.torch: average= is deprecated (a DeprecationWarning, as Horovod) and excludes op=."""
    if average is not None:
        if op is not None:
            raise ValueError("pass either op= or the deprecated average=, not both")
        import warnings
        warnings.warn("average= is the old spelling of op=: average=True is op=Average, average=False is "
                      "op=Sum; it will go in a later release",
                      DeprecationWarning, stacklevel=4)
    return check_op(_api.resolve_op(op, average))


def dtype_code(tensor, what):
    code = DTYPE_CODES.get(tensor.dtype)
    if code is None:
        raise ValueError(f"{what}: unsupported tensor dtype {tensor.dtype} (supported: "
                         f"{', '.join(str(d).replace('torch.', '') for d in DTYPE_CODES)})")
    return code


def check_tensor(tensor, what):
    """ValueError unless `tensor` is a dense torch tensor the core can address. Returns its dtype code."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout != torch.strided:
        raise ValueError(f"{what}: {tensor.layout} tensors are not supported (use a dense tensor; the "
                         f"optimizer handles sparse gradients itself)")
    return dtype_code(tensor, what)


def device_of(tensor):
    return tensor.device.index if tensor.device.type == "cuda" else -1


def stream_of(tensor):
    """The cudaStream_t the tensor's producers are queued on (the device's current stream): the GPU backend
    orders the collective after it. 0 (unused) for CPU tensors."""
    return torch.cuda.current_stream(tensor.device).cuda_stream if tensor.is_cuda else 0


def contiguous(tensor):
    # detach(): the engine writes through raw pointers, outside autograd's knowledge.
    t = tensor.detach()
    return t if t.is_contiguous() else t.contiguous()


def shape_of(tensor):
    return tuple(int(s) for s in tensor.shape)


def at_least_1d(tensor, what):
    if tensor.dim() == 0:
        raise ValueError(f"{what}: needs at least one dimension (got a 0-dim tensor)")


def process_set(ps):
    return process_sets.resolve(ps)


def set_root(root_rank, ps):
    """horovod.torch's root_rank is a global rank, also for process sets; the engine wants the position
    inside the set."""
    return _api.check_root(root_rank, ps.ranks)


def set_rank(ps):
    """This process's rank inside the process set."""
    return ps.ranks.index(basics.rank()) if ps.process_set_id != 0 else basics.rank()


def set_size(ps):
    return len(ps.ranks) if ps.process_set_id != 0 else basics.size()


def from_result(result, dtype, device=None):
    """The engine-owned output bytes of allgather/alltoall as a tensor of `dtype` in the result's shape
    (no copy: the tensor shares the numpy array's, or for CUDA requests the device buffer's, memory, which
    it keeps alive)."""
    shape = tuple(int(s) for s in result.output_shape)
    out = result.output
    if isinstance(out, _core.DeviceBuffer):
        # CUDA request: the engine's device memory, wrapped without a copy (the tensor keeps it alive).
        flat = torch.as_tensor(out, device=torch.device("cuda", out.device))
        return flat.view(dtype).reshape(shape)
    if out is None or out.size == 0:
        t = torch.empty(shape, dtype=dtype)
    else:
        flat = torch.from_numpy(out.reshape(-1)) if out.flags.writeable else torch.tensor(out.reshape(-1))
        t = flat.view(dtype).reshape(shape)
    if device is not None and device.type != "cpu":
        t = t.to(device)
    return t


def checked_named_parameters(param_groups, named_parameters):
    """named_parameters as a list of (name, parameter), checked as Horovod checks it: tuples, unique
    names, every parameter of param_groups named. None: every parameter gets a generated name."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        all_params = [v for group in param_groups for v in group["params"]]
        named_parameters = [("allreduce.noname.%s" % i, v) for i, v in enumerate(all_params)]
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters: expected (name, parameter) pairs, as model.named_parameters() "
                         "gives them")
    names = [k for k, _ in named_parameters]
    dups = sorted({k for k in names if names.count(k) > 1})
    if dups:
        raise ValueError("named_parameters: each name may name one parameter only; repeated: %s"
                         % ", ".join(dups))
    all_ids = {id(v) for group in param_groups for v in group["params"]}
    unnamed = all_ids - {id(v) for _, v in named_parameters}
    if unnamed:
        raise ValueError("named_parameters leaves out parameters the optimizer updates (their Python "
                         "object ids: %s); name every one of them" % ", ".join(str(i) for i in unnamed))
    return named_parameters
