"""Model/optimizer state synchronisation and object collectives, as horovod.torch.functions.

broadcast_object/allgather_object serialize with cloudpickle, as Horovod (so lambdas and classes defined
inside functions travel too), only the object the caller passes in, on the rank that produced it; the
receivers unpickle what the job's other ranks sent (peers authenticated by the job secret). The pickled
size travels first so that every rank can allocate the receive buffer. Unnamed calls are named
"<kind>[.ps<id>].<n>", n counting per process set: ranks outside a set do not count its calls, so a call
on a sub-set cannot shift the names of later calls on other sets.
root_rank is a global rank everywhere, also on a process set (as Horovod).
Differences from Horovod: scalar hyperparameters travel as float64 (Horovod used float32, which turns
lr=0.1 into 0.10000000149), non-numeric ones (None, strings) as one broadcast object; a fresh root
leaves every rank's state fresh, and initialising a rank's empty state for the root's to fill in does
not move its parameters (Horovod's zero-gradient step could, with weight decay).
"""
import collections
from typing import Any, Iterable, List, Mapping, Optional, Union

import cloudpickle
import torch

from pyhorovod import basics
from pyhorovod.process_sets import ProcessSet, global_process_set
from pyhorovod.torch import _convert as cv
from pyhorovod.torch import ops

# (kind, process set id) -> unnamed object collectives made so far; every rank restarts with a new engine.
_object_calls = {}
basics.on_shutdown(_object_calls.clear)


def broadcast_parameters(params: Union[Mapping[str, torch.Tensor], Iterable], root_rank: int,
                         process_set: ProcessSet = global_process_set) -> None:
    """Overwrites every rank's tensors, in place, with the root rank's.

    Call it once after building the model (and after loading a checkpoint on the root) so that every
    rank starts from the same weights.

    Args:
        params: a ``state_dict`` or other dict of name -> tensor (sent in sorted name order), a list of
            ``(name, tensor)`` pairs such as ``model.named_parameters()``, or a list of tensors. The same
            structure on every rank.
        root_rank: the rank whose values win (a global rank).
        process_set: the ranks that take part (default: all).

    Raises:
        ValueError: params of another type, an entry that is not a tensor, or a root outside the set.
        HorovodInternalError: a broadcast failed.
    """
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, "__next__"):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    cv.set_root(root_rank, cv.process_set(process_set))
    handles = []
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"broadcast_parameters: {name or 'an entry'} is a {type(p).__name__}, not a tensor")
        handles.append(ops.broadcast_async_(p, root_rank, name=f"broadcast.{name}" if name else None,
                                            process_set=process_set))
    for h in handles:
        ops.synchronize(h)


def _is_number(x):
    return isinstance(x, (bool, int, float))


def _numeric(x):
    """True for numbers and (nested) tuples/lists of numbers, e.g. Adam's betas."""
    if isinstance(x, (tuple, list)):
        return len(x) > 0 and all(_numeric(v) for v in x)
    return _is_number(x)


def _flatten(x):
    return [v for item in x for v in _flatten(item)] if isinstance(x, (tuple, list)) else [x]


def _rebuild(template, values):
    """Rebuilds `template`'s structure and element types from a flat iterator of floats."""
    if isinstance(template, (tuple, list)):
        return type(template)(_rebuild(t, values) for t in template)
    v = next(values)
    return type(template)(v) if not isinstance(template, bool) else bool(v)


def _params_requiring_grad(optimizer):
    return [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]


def _zero_grads(optimizer):
    """A zero .grad on every parameter that requires a gradient, as Horovod leaves them after initialising
    a rank's empty optimizer state (parameters with requires_grad=False keep grad None)."""
    for p in _params_requiring_grad(optimizer):
        p.grad = torch.zeros_like(p)
        if isinstance(optimizer, torch.optim.SparseAdam):
            p.grad = p.grad.to_sparse()


def _init_empty_state(optimizer):
    """Creates the optimizer's state (momentum buffers, Adam moments) by one step on zero gradients, then
    restores the parameters, so that a rank without state (a resume where only the root loaded a
    checkpoint) has the root's state structure for the broadcast to fill in."""
    saved = [(p, p.detach().clone()) for p in _params_requiring_grad(optimizer)]
    _zero_grads(optimizer)
    # A DistributedOptimizer's step() would allreduce; the wrapped class's step only updates locally.
    step = getattr(optimizer, "_local_step", None) or optimizer.step
    with torch.no_grad():
        step()
        for p, data in saved:
            p.copy_(data)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              model: Optional[torch.nn.Module] = None,
                              process_set: ProcessSet = global_process_set) -> None:
    """Makes every rank's optimizer state and hyperparameters (lr, momentum, ...) equal to the root's.

    The state tensors (momentum buffers, Adam's moments) are broadcast in place. A rank whose optimizer
    has no state yet (a fresh optimizer, while the root loaded a checkpoint) gets it created first, and
    then every parameter that requires a gradient is left with a zero ``.grad``, as with Horovod; unlike
    Horovod's, creating that state does not move the parameters. Scalar hyperparameters travel as
    float64 (Horovod rounds them through float32).

    Args:
        optimizer: a torch optimizer, plain or wrapped by :func:`DistributedOptimizer`.
        root_rank: the rank whose state wins (a global rank).
        model: accepted for Horovod's signature and unused: the parameters are found through the
            optimizer.
        process_set: the ranks that take part (default: all).

    Raises:
        ValueError: ``torch.optim.LBFGS`` (whose state cannot be broadcast), a model that is not a
            ``torch.nn.Module``, or a root outside the set.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise ValueError(f"broadcast_optimizer_state: model must be a torch.nn.Module or None, got "
                         f"{type(model).__name__}")
    cv.set_root(root_rank, cv.process_set(process_set))
    had_state = len(optimizer.state) > 0
    # First whether the root has any state: a fresh root means fresh state everywhere (so a fresh Adam
    # keeps step 0 instead of Horovod's step 1 from its zero-gradient initialisation step).
    root_has_state = torch.tensor([int(had_state)], dtype=torch.int32)
    ops.broadcast_(root_has_state, root_rank, name="opt_state.has_state", process_set=process_set)
    if not root_has_state.item():
        optimizer.state.clear()
    elif not had_state:
        _init_empty_state(optimizer)
    if not had_state:
        _zero_grads(optimizer)
    state_dict = optimizer.state_dict()

    tensors, numeric, others = [], [], {}
    for index, group in enumerate(state_dict["param_groups"]):
        for key, value in sorted(group.items()):
            if key == "params":
                continue
            if _numeric(value):
                numeric.append(("group", index, key, value))
            else:
                others[(index, key)] = value
        for pid in group["params"]:
            for key, value in sorted(state_dict["state"].get(pid, {}).items(), key=lambda kv: str(kv[0])):
                if torch.is_tensor(value):
                    tensors.append((f"{pid}.{key}", value))
                elif _numeric(value):
                    numeric.append(("state", pid, key, value))
                else:
                    others[("state", pid, key)] = value

    # DistributedOptimizer(lr_scaling=...) counts warmup steps outside the torch state: resume it too.
    if isinstance(getattr(optimizer, "_lr_step", None), int):
        numeric.append(("attr", None, "_lr_step", optimizer._lr_step))
    # PowerSGD's iteration and Q's: the root's (every rank must compress from the same step on, with the
    # same Q's); its error buffers stay each rank's own (see pyhorovod/torch/powersgd_optimizer.py).
    if callable(getattr(optimizer, "sync_powersgd_state", None)):
        optimizer.sync_powersgd_state(root_rank, process_set)
    # Numbers ride in one float64 tensor; bool/int types are restored from the local template.
    flat = [float(v) for item in numeric for v in _flatten(item[3])]
    packed = torch.tensor(flat, dtype=torch.float64)
    if flat:
        tensors.append(("__scalars__", packed))
    occurrences = collections.Counter()
    named = []
    for name, t in tensors:
        occurrences[name] += 1
        named.append((f"opt_state.{name}.{occurrences[name]}", t))
    broadcast_parameters(named, root_rank, process_set=process_set)

    values = iter(packed.tolist())
    for kind, where, key, template in numeric:
        value = _rebuild(template, values)
        if kind == "group":
            optimizer.param_groups[where][key] = value
        elif kind == "attr":
            setattr(optimizer, key, value)
        else:
            optimizer.state[_param_by_index(optimizer, where)][key] = value
    if others:
        received = broadcast_object(others, root_rank, name="opt_state.others", process_set=process_set)
        for k, v in received.items():
            if k[0] == "state":
                optimizer.state[_param_by_index(optimizer, k[1])][k[2]] = v
            else:
                optimizer.param_groups[k[0]][k[1]] = v


def _param_by_index(optimizer, index):
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return params[index]


def _object_name(name, kind, ps):
    if name:
        return name
    key = (kind, ps.process_set_id)
    _object_calls[key] = _object_calls.get(key, 0) + 1
    where = f".ps{ps.process_set_id}" if ps.process_set_id else ""
    return f"{kind}{where}.{_object_calls[key]}"


def _unpickle(data: bytes):
    return cloudpickle.loads(data)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Sends any picklable Python object from the root rank to every rank of the set.

    Only the root serializes (with cloudpickle, so lambdas and classes defined inside functions
    travel); the other ranks' ``obj`` is ignored.

    Args:
        obj: the object, on the root.
        root_rank: the sending rank (a global rank).
        name: the request's name, the same on every rank (automatic when None).
        process_set: the ranks that take part (default: all).

    Returns:
        The root's object: on the root ``obj`` itself, elsewhere an unpickled copy.
    """
    ps = cv.process_set(process_set)
    cv.set_root(root_rank, ps)
    name = _object_name(name, "broadcast_object", ps)
    is_root = basics.rank() == root_rank
    payload = torch.frombuffer(bytearray(cloudpickle.dumps(obj)), dtype=torch.uint8) if is_root else None
    size = torch.tensor([payload.numel() if is_root else 0], dtype=torch.int64)
    ops.broadcast_(size, root_rank, name=f"{name}.sz", process_set=ps)
    if payload is None:
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    ops.broadcast_(payload, root_rank, name=f"{name}.t", process_set=ps)
    return obj if is_root else _unpickle(payload.numpy().tobytes())


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> List[Any]:
    """Collects a picklable Python object from every rank of the set.

    Args:
        obj: this rank's object (serialized with cloudpickle).
        name: the request's name, the same on every rank (automatic when None).
        process_set: the ranks that take part (default: all).

    Returns:
        The list of every set rank's object, in set-rank order; this rank's own entry is a copy too, as
        in Horovod.
    """
    ps = cv.process_set(process_set)
    name = _object_name(name, "allgather_object", ps)
    payload = torch.frombuffer(bytearray(cloudpickle.dumps(obj)), dtype=torch.uint8)
    sizes = ops.synchronize(ops.allgather_async(torch.tensor([payload.numel()], dtype=torch.int64),
                                                name=f"{name}.sz", process_set=ps)).tolist()
    gathered = ops.synchronize(ops.allgather_async(payload, name=f"{name}.t", process_set=ps)).numpy()
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    return [_unpickle(gathered[lo:hi].tobytes()) for lo, hi in zip(offsets, offsets[1:])]
