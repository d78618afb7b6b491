"""pyhorovod.torch functions: broadcast_parameters, broadcast_optimizer_state (SGD-momentum, Adam, fresh
and partly fresh states, scalar hyperparameters), broadcast_object, allgather_object, and SyncBatchNorm
against one process normalising the whole batch. One launch per world size runs every section."""
import pytest

import torch_launch


def _tolist(v):
    import torch
    if isinstance(v, torch.Tensor):
        return {"tensor": v.tolist(), "dtype": str(v.dtype)}
    if isinstance(v, tuple):
        return {"tuple": [_tolist(x) for x in v]}
    return {"value": v, "type": type(v).__name__}


def _opt_snapshot(opt):
    """JSON view of an optimizer: hyperparameters (with their types) and state (with dtypes)."""
    sd = opt.state_dict()
    groups = [{k: _tolist(v) for k, v in g.items() if k != "params"} for g in sd["param_groups"]]
    state = {str(pid): {k: _tolist(v) for k, v in st.items()} for pid, st in sd["state"].items()}
    return {"groups": groups, "state": state}


def section_broadcast_parameters(hvd):
    import torch
    r = hvd.rank()
    out = {}
    torch.manual_seed(100 + r)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    model[1].num_batches_tracked.fill_(7 * r)  # int64 buffer
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    out["state_dict"] = {k: v.tolist() for k, v in model.state_dict().items()}
    torch.manual_seed(200 + r)
    m2 = torch.nn.Linear(2, 2)
    hvd.broadcast_parameters(list(m2.named_parameters()), root_rank=hvd.size() - 1)
    out["named_list"] = [p.tolist() for p in m2.parameters()]
    torch.manual_seed(300 + r)
    m3 = torch.nn.Linear(2, 1)
    hvd.broadcast_parameters(m3.named_parameters(), root_rank=0)      # a generator works too
    hvd.broadcast_parameters(list(m3.parameters()), root_rank=0)
    out["plain_list"] = [p.tolist() for p in m3.parameters()]
    try:
        hvd.broadcast_parameters(42, root_rank=0)
        out["bad type"] = "no error"
    except ValueError as e:
        out["bad type"] = str(e)
    return out


def _adam_case(hvd, steps_by_rank, betas_by_rank):
    import torch
    r = hvd.rank()
    torch.manual_seed(7)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1), betas=betas_by_rank(r),
                           weight_decay=0.1 * r, amsgrad=False)
    for i in range(steps_by_rank(r)):
        opt.zero_grad()
        model(torch.full((2, 3), float(r + i + 1))).sum().backward()
        opt.step()
    before = [p.detach().clone() for p in model.parameters()]
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    unmoved = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    snap = _opt_snapshot(opt)
    # the state is usable: one more step with the same parameters and gradient gives the same result
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    return {"snapshot": snap, "unmoved": unmoved, "after_step": [p.tolist() for p in model.parameters()],
            "nstate": len(opt.state)}


def section_broadcast_optimizer_state(hvd):
    import torch
    r = hvd.rank()
    out = {}
    # SGD with momentum: the root has momentum buffers, the others are fresh; hyperparameters differ
    torch.manual_seed(11)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), momentum=0.9 - 0.1 * r,
                          nesterov=(r == 0), weight_decay=0.01 * (r + 1))
    if r == 0:
        for i in range(2):
            opt.zero_grad()
            model(torch.full((1, 3), float(i + 1))).sum().backward()
            opt.step()
    before = [p.detach().clone() for p in model.parameters()]
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    out["sgd"] = _opt_snapshot(opt)
    out["sgd unmoved"] = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # Adam: root 3 steps, others 1 step or fresh; betas (a tuple) differ
    out["adam"] = _adam_case(hvd, lambda k: 3 if k == 0 else k % 2, lambda k: (0.9, 0.999) if k == 0 else (0.8, 0.99))
    # everybody fresh: stays fresh (step 0 state is created by the next real step only)
    out["adam fresh"] = _adam_case(hvd, lambda k: 0, lambda k: (0.85, 0.995))
    # fresh root, others with state: the others' state is dropped
    out["adam root fresh"] = _adam_case(hvd, lambda k: 0 if k == 0 else 2, lambda k: (0.9, 0.999))
    return out


def section_objects(hvd):
    r, n = hvd.rank(), hvd.size()
    obj = {"rank": r, "nested": [1, (2, 3.5)], "text": "x" * (r * 1000)} if r == 0 else None
    got = hvd.broadcast_object(obj, root_rank=0)
    last = hvd.broadcast_object({"from": r}, root_rank=n - 1, name="custom.name")
    gathered = hvd.allgather_object({"r": r, "pad": "y" * (37 * r)})
    empty = hvd.allgather_object(b"")
    return {"bcast": [got["rank"], got["nested"][1][1], len(got["text"])], "last": last["from"],
            "gathered": [(g["r"], len(g["pad"])) for g in gathered], "empty": [len(e) for e in empty]}


def _maxabs(t):
    return float(t.abs().max()) if t.numel() else 0.0


def _bn_case(hvd, rows_of, shape_tail, affine=True):
    import torch
    r, n = hvd.rank(), hvd.size()
    counts = [rows_of(k) for k in range(n)]
    g = torch.Generator().manual_seed(3)
    c = shape_tail[0]
    full = torch.randn((sum(counts),) + shape_tail, generator=g, dtype=torch.float64) * 3 + 1
    coef = torch.randn(full.shape, generator=g, dtype=torch.float64)
    lo = sum(counts[:r])
    mine = full[lo:lo + counts[r]].clone().requires_grad_()
    sbn = hvd.SyncBatchNorm(c, affine=affine, momentum=0.3).double()
    ref = (torch.nn.BatchNorm1d if len(shape_tail) <= 2 else torch.nn.BatchNorm2d)(c, affine=affine,
                                                                                  momentum=0.3).double()
    if affine:
        with torch.no_grad():
            for m in (sbn, ref):
                m.weight.copy_(torch.arange(1, c + 1, dtype=torch.float64) * 0.5)
                m.bias.copy_(torch.arange(c, dtype=torch.float64) - 1)
    y = sbn(mine)
    (y * coef[lo:lo + counts[r]]).sum().backward()
    fx = full.clone().requires_grad_()
    y_ref = ref(fx)
    (y_ref * coef).sum().backward()
    d = {"y": _maxabs(y - y_ref[lo:lo + counts[r]]),
         "dx": _maxabs(mine.grad - fx.grad[lo:lo + counts[r]]),
         "running_mean": _maxabs(sbn.running_mean - ref.running_mean),
         "running_var": _maxabs(sbn.running_var - ref.running_var),
         "batches": int(sbn.num_batches_tracked)}
    if affine:
        # weight/bias gradients are local; summed over ranks they are the whole batch's
        gw = hvd.allreduce(sbn.weight.grad, op=hvd.Sum)
        gb = hvd.allreduce(sbn.bias.grad, op=hvd.Sum)
        d["dweight"] = _maxabs(gw - ref.weight.grad)
        d["dbias"] = _maxabs(gb - ref.bias.grad)
    sbn.eval()
    ref.eval()
    d["eval"] = _maxabs(sbn(full[:2]) - ref(full[:2]))
    return d


def section_sync_batch_norm(hvd):
    return {
        "equal 1d": _bn_case(hvd, lambda k: 4, (3,)),
        "uneven 3d": _bn_case(hvd, lambda k: k + 1, (2, 5)),
        "empty rank 0, 4d": _bn_case(hvd, lambda k: 0 if k == 0 and hvd.size() > 1 else 3, (2, 3, 2)),
        "no affine": _bn_case(hvd, lambda k: 2, (3, 4), affine=False),
    }


def body_all():
    import traceback
    import torch
    import pyhorovod.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    out = {}
    for name, fn in [("params", section_broadcast_parameters), ("opt", section_broadcast_optimizer_state),
                     ("objects", section_objects), ("sbn", section_sync_batch_norm)]:
        try:
            out[name] = fn(hvd)
        except Exception:  # noqa: BLE001 -- reported by the matching test
            out[name] = {"traceback": traceback.format_exc()}
    hvd.shutdown()
    return out


@pytest.fixture(scope="module", params=[1, 2, 3])
def launched(request):
    # One launch per world size shared with the other torch test files (tests/torch_launch.py).
    return torch_launch.launched(request.param, "functions")


def _sections(launched, name):
    size, results = launched
    assert len(results) == size
    out = []
    for res in results:
        sec = res.value[name]
        assert "traceback" not in sec, f"rank {res.rank}:\n{sec['traceback']}\n{res.stderr[-3000:]}"
        out.append(sec)
    return out


def test_broadcast_parameters(launched):
    secs = _sections(launched, "params")
    for s in secs:
        assert s["state_dict"] == secs[0]["state_dict"]
        assert s["state_dict"]["1.num_batches_tracked"] == 0
        assert s["named_list"] == secs[-1]["named_list"]
        assert s["plain_list"] == secs[0]["plain_list"]
        assert s["bad type"] == "invalid params of type: <class 'int'>"


def test_broadcast_optimizer_state(launched):
    secs = _sections(launched, "opt")
    root = secs[0]
    assert root["sgd"]["groups"][0]["lr"] == {"value": 0.1, "type": "float"}
    assert root["sgd"]["groups"][0]["nesterov"] == {"value": True, "type": "bool"}
    assert len(root["sgd"]["state"]) == 2 and len(root["adam"]["snapshot"]["state"]) == 2
    assert root["adam"]["snapshot"]["groups"][0]["betas"] == {"tuple": [{"value": 0.9, "type": "float"},
                                                                        {"value": 0.999, "type": "float"}]}
    assert root["adam"]["snapshot"]["state"]["0"]["step"] == {"tensor": 3.0, "dtype": "torch.float32"}
    for rank, s in enumerate(secs):
        assert s["sgd"] == root["sgd"], f"rank {rank}"
        assert s["sgd unmoved"], f"rank {rank}: initialising the state moved the parameters"
        for case in ("adam", "adam fresh", "adam root fresh"):
            assert s[case]["snapshot"] == root[case]["snapshot"], f"rank {rank} {case}"
            assert s[case]["after_step"] == root[case]["after_step"], f"rank {rank} {case}"
            assert s[case]["unmoved"], f"rank {rank} {case}"
        assert s["adam fresh"]["snapshot"]["state"] == {}
        assert s["adam root fresh"]["snapshot"]["state"] == {}


def test_broadcast_and_allgather_object(launched):
    size = launched[0]
    for s in _sections(launched, "objects"):
        assert s["bcast"] == [0, 3.5, 0]
        assert s["last"] == size - 1
        assert s["gathered"] == [[k, 37 * k] for k in range(size)]
        assert s["empty"] == [0] * size


def test_sync_batch_norm_equals_whole_batch(launched):
    for rank, s in enumerate(_sections(launched, "sbn")):
        for case, d in s.items():
            assert d["batches"] == 1, (rank, case, d)
            for key, v in d.items():
                if key != "batches":
                    assert v < 1e-10, (rank, case, key, d)
