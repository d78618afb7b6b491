"""pyhorovod.torch.functions as horovod.torch.functions: broadcast_optimizer_state(optimizer, root_rank,
model=...) leaves a zero .grad on each parameter that requires one when the rank's optimizer was fresh
(grad None for frozen ones); broadcast_object/allgather_object carry what cloudpickle carries (lambdas,
classes defined in a function); unnamed object calls on a process set do not shift the names of later
calls on the global set (each would otherwise wait for a name the other ranks never submit)."""
import pytest

from mp import run_ranks


def _model(torch):
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    model[1].bias.requires_grad_(False)
    return model


def body_optimizer_grads():
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    r = hvd.rank()
    out = {}
    for kind in ("sgd", "adam", "plain sgd"):
        torch.manual_seed(r)
        model = _model(torch)
        make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                "adam": lambda p: torch.optim.Adam(p, lr=0.01),
                "plain sgd": lambda p: torch.optim.SGD(p, lr=0.1)}[kind]
        opt = make(model.parameters())
        hvd.broadcast_optimizer_state(opt, root_rank=0, model=model)
        out[kind] = {name: None if p.grad is None else p.grad.tolist() for name, p in model.named_parameters()}
        # After a real step: with state (momentum, Adam) the gradients are left alone; plain SGD never
        # has state, so its gradients are zeroed again (as Horovod's initialisation step does).
        model(torch.ones(1, 3)).sum().backward()
        before = {name: None if p.grad is None else p.grad.clone() for name, p in model.named_parameters()}
        opt.step()
        hvd.broadcast_optimizer_state(opt, 0, model)
        out[kind + " after a step"] = {name: None if p.grad is None else p.grad.tolist()
                                       for name, p in model.named_parameters()}
        out[kind + " before"] = {name: None if g is None else g.tolist() for name, g in before.items()}
    try:
        hvd.broadcast_optimizer_state(opt, 0, model="not a model")
        out["bad model"] = "no error"
    except ValueError as e:
        out["bad model"] = str(e)
    hvd.shutdown()
    return out


@pytest.mark.parametrize("size", [1, 2])
def test_broadcast_optimizer_state_with_model_leaves_zero_grads(size):
    zero = {"0.weight": [[0.0] * 3] * 2, "0.bias": [0.0] * 2, "1.weight": [[0.0] * 2], "1.bias": None}
    for res in run_ranks(body_optimizer_grads, size, timeout=180):
        got = res.value
        for kind in ("sgd", "adam", "plain sgd"):
            assert got[kind] == zero, (res.rank, kind, got[kind])
            after = zero if kind == "plain sgd" else got[kind + " before"]
            assert got[kind + " after a step"] == after, (res.rank, kind, got[kind + " after a step"])
            assert got[kind + " before"]["1.bias"] is None and got[kind + " before"] != zero
        assert "model must be a torch.nn.Module" in got["bad model"], got["bad model"]


def body_objects():
    import pyhorovod.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()

    class Local:  # defined inside a function: plain pickle cannot carry it
        def __init__(self, value):
            self.value = value

        def twice(self):
            return 2 * self.value

    out = {}
    offset = 100 * r
    f = hvd.broadcast_object((lambda x: x * 3 + offset) if r == 0 else None, root_rank=0)
    out["lambda from 0"] = f(2)
    out["local class from last"] = hvd.broadcast_object(Local(7 + r) if r == n - 1 else None,
                                                        root_rank=n - 1).twice()
    out["gathered lambdas"] = [g(1) for g in hvd.allgather_object(lambda x: x + offset)]
    out["gathered local"] = [o.value for o in hvd.allgather_object(Local(r))]
    hvd.shutdown()
    return out


@pytest.mark.parametrize("size", [1, 2, 3])
def test_object_collectives_carry_lambdas_and_local_classes(size):
    n = size
    results = run_ranks(body_objects, size, timeout=180)
    for res in results:
        got = res.value
        assert got["lambda from 0"] == 6, got
        assert got["local class from last"] == 2 * (7 + n - 1), got
        assert got["gathered lambdas"] == [1 + 100 * k for k in range(n)], got
        assert got["gathered local"] == list(range(n)), got


def body_set_names():
    import pyhorovod.torch as hvd
    tail = hvd.ProcessSet([1, 2])
    hvd.init(process_sets=[tail])
    r = hvd.rank()
    out = {}
    # Unnamed calls on the set [1, 2] only, then unnamed calls on the global set.
    if r in tail.ranks:
        out["tail bcast"] = hvd.broadcast_object({"from": r}, root_rank=2, process_set=tail)
        out["tail gather"] = hvd.allgather_object(r * r, process_set=tail)
    out["global bcast"] = hvd.broadcast_object({"from": r}, root_rank=0)
    out["global gather"] = hvd.allgather_object(-r)
    hvd.shutdown()
    return out


def test_object_calls_on_a_set_do_not_shift_global_names():
    # Before per-set naming, ranks 1 and 2 named their global calls one further than rank 0: a timeout.
    for res in run_ranks(body_set_names, 3, timeout=120, collective_timeout=30):
        got = res.value
        if res.rank >= 1:
            assert got["tail bcast"] == {"from": 2} and got["tail gather"] == [1, 4], got
        assert got["global bcast"] == {"from": 0} and got["global gather"] == [0, -1, -2], got
