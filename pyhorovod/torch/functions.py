"""Model/optimizer state synchronisation and object collectives, as horovod.torch.functions.

broadcast_object/allgather_object pickle only the object the caller passes in, on the rank that produced
it; the receivers unpickle what the job's other ranks sent (peers authenticated by the job secret). The
pickled size travels first so that every rank can allocate the receive buffer.
Differences from Horovod: scalar hyperparameters travel as float64 (Horovod used float32, which turns
lr=0.1 into 0.10000000149), non-numeric ones (None, strings) as one broadcast object; a fresh root
leaves every rank's state fresh, and initialising a rank's empty state for the root's to fill in does
not move its parameters (Horovod's zero-gradient step could, with weight decay).
"""
import collections
import itertools
import pickle

import torch

from pyhorovod.process_sets import global_process_set
from pyhorovod.torch import _convert as cv
from pyhorovod.torch import ops

_object_calls = itertools.count()


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcasts tensors in place from root_rank: a state_dict / dict of name -> tensor, a list of
    (name, tensor) pairs (model.named_parameters()) or a list of tensors."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, "__next__"):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
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


def _init_empty_state(optimizer):
    """Creates the optimizer's state (momentum buffers, Adam moments) by one step on zero gradients, then
    restores the parameters and gradients, so that a rank without state (a resume where only the root
    loaded a checkpoint) has the root's state structure for the broadcast to fill in."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    saved = [(p, p.detach().clone(), p.grad) for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
        if isinstance(optimizer, torch.optim.SparseAdam):
            p.grad = p.grad.to_sparse()
    # A DistributedOptimizer's step() would allreduce; the wrapped class's step only updates locally.
    step = getattr(optimizer, "_local_step", None) or optimizer.step
    with torch.no_grad():
        step()
        for p, data, grad in saved:
            p.copy_(data)
            p.grad = grad


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes every rank's optimizer state and hyperparameters equal to root_rank's (in place)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    # First whether the root has any state: a fresh root means fresh state everywhere (so a fresh Adam
    # keeps step 0 instead of Horovod's step 1 from its zero-gradient initialisation step).
    root_has_state = torch.tensor([int(len(optimizer.state) > 0)], dtype=torch.int32)
    ops.broadcast_(root_has_state, root_rank, name="opt_state.has_state", process_set=process_set)
    if not root_has_state.item():
        optimizer.state.clear()
    elif len(optimizer.state) == 0:
        _init_empty_state(optimizer)
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


def _object_name(name, kind):
    return name if name else f"{kind}.{next(_object_calls)}"


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` on every rank of the set (pickled on the root only)."""
    ps = cv.process_set(process_set)
    name = _object_name(name, "broadcast_object")
    from pyhorovod import basics
    if basics.rank() == root_rank:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)),
                                   dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        payload, size = None, torch.zeros(1, dtype=torch.int64)
    ops.broadcast_(size, root_rank, name=f"{name}.sz", process_set=ps)
    if payload is None:
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    ops.broadcast_(payload, root_rank, name=f"{name}.t", process_set=ps)
    if basics.rank() == root_rank:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every set rank's `obj`, in set-rank order (each pickled by its owner)."""
    ps = cv.process_set(process_set)
    name = _object_name(name, "allgather_object")
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, torch.uint8)
    sizes = ops.synchronize(ops.allgather_async(torch.tensor([payload.numel()], dtype=torch.int64),
                                                name=f"{name}.sz", process_set=ps)).tolist()
    gathered = ops.synchronize(ops.allgather_async(payload, name=f"{name}.t", process_set=ps)).numpy()
    me = cv.set_rank(ps)
    out, offset = [], 0
    for i, n in enumerate(sizes):
        out.append(obj if i == me else pickle.loads(gathered[offset:offset + n].tobytes()))
        offset += n
    return out
