"""One meaning of root_rank: a global rank, on the global set and on process sets, in the numpy API and in
pyhorovod.torch (broadcast in all its forms, its autograd, broadcast_object, broadcast_parameters,
broadcast_optimizer_state), as Horovod. A root that is not in the set is a ValueError on the caller.
Seen at 3 ranks with the set [1, 2]."""
from mp import run_ranks


def body():
    import numpy as np
    import torch
    import pyhorovod
    import pyhorovod.torch as hvd
    ps = hvd.ProcessSet([1, 2])
    hvd.init(process_sets=[ps])
    r = hvd.rank()
    out = {}
    x = np.array([10 * r, 10 * r + 1], np.int64)
    t = torch.tensor([10 * r, 10 * r + 1], dtype=torch.int64)
    roots = [1, 2] if r in ps.ranks else []
    for root in roots:
        out[f"np broadcast {root}"] = pyhorovod.broadcast(x, root, process_set=ps).tolist()
        y = x.copy()
        pyhorovod.broadcast_(y, root_rank=root, process_set=ps)
        out[f"np broadcast_ {root}"] = y.tolist()
        out[f"np async {root}"] = pyhorovod.synchronize(pyhorovod.broadcast_async(x, root, process_set=ps)).tolist()
        out[f"torch broadcast {root}"] = hvd.broadcast(t, root, process_set=ps).tolist()
        u = t.clone()
        hvd.broadcast_(u, root, process_set=ps)
        out[f"torch broadcast_ {root}"] = u.tolist()
        out[f"object {root}"] = hvd.broadcast_object({"from": r}, root_rank=root, process_set=ps)
        params = {"w": torch.full((2,), float(r))}
        hvd.broadcast_parameters(params, root_rank=root, process_set=ps)
        out[f"parameters {root}"] = params["w"].tolist()
        p = torch.nn.Parameter(torch.zeros(2))
        opt = torch.optim.SGD([p], lr=0.5 + r, momentum=0.1 * r)
        hvd.broadcast_optimizer_state(opt, root_rank=root, process_set=ps)
        out[f"optimizer {root}"] = [opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]]
        b = torch.ones(3, requires_grad=True)
        (hvd.broadcast(b, root, process_set=ps) * float(r)).sum().backward()
        out[f"broadcast grad {root}"] = b.grad.tolist()
    if r in ps.ranks:
        errors = {
            "np broadcast": lambda: pyhorovod.broadcast(x, 0, process_set=ps),
            "np broadcast_async_": lambda: pyhorovod.broadcast_async_(x, 0, process_set=ps),
            "torch broadcast": lambda: hvd.broadcast(t, 0, process_set=ps),
            "torch broadcast_": lambda: hvd.broadcast_(t, 0, process_set=ps),
            "object": lambda: hvd.broadcast_object(1, root_rank=0, process_set=ps),
            "parameters": lambda: hvd.broadcast_parameters({"w": torch.zeros(1)}, 0, process_set=ps),
            "empty parameters": lambda: hvd.broadcast_parameters([], 0, process_set=ps),
            "optimizer": lambda: hvd.broadcast_optimizer_state(
                torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), 0, process_set=ps),
        }
        for label, call in errors.items():
            try:
                call()
                out[f"error {label}"] = "no error"
            except ValueError as e:
                out[f"error {label}"] = str(e)
        hvd.barrier(process_set=ps)  # nothing was left in flight by the rejected calls
    out["global np"] = pyhorovod.broadcast(x, 2).tolist()
    out["global torch"] = hvd.broadcast(t, 1).tolist()
    try:
        pyhorovod.broadcast(x, 3)
        out["global out of range"] = "no error"
    except ValueError as e:
        out["global out of range"] = str(e)
    hvd.shutdown()
    return out


def test_root_rank_is_global_everywhere():
    results = run_ranks(body, 3, timeout=180, collective_timeout=60)
    for res in results:
        got, r = res.value, res.rank
        assert got["global np"] == [20, 21] and got["global torch"] == [10, 11], got
        assert "root_rank=3 is out of range" in got["global out of range"], got
        if r == 0:
            continue
        for root in (1, 2):
            data = [10 * root, 10 * root + 1]
            for form in ("np broadcast", "np broadcast_", "np async", "torch broadcast", "torch broadcast_"):
                assert got[f"{form} {root}"] == data, (r, form, root, got)
            assert got[f"object {root}"] == {"from": root}, (r, root)
            assert got[f"parameters {root}"] == [float(root)] * 2, (r, root)
            assert got[f"optimizer {root}"] == [0.5 + root, 0.1 * root], (r, root)
            # Horovod's broadcast backward: the set's averaged output gradient (r = 1, 2) on the root only
            assert got[f"broadcast grad {root}"] == [1.5 if r == root else 0.0] * 3, (r, root)
        for key, message in got.items():
            if key.startswith("error "):
                assert "root_rank=0" in message and "[1, 2]" in message, (r, key, message)
