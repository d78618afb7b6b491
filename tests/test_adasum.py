"""op=Adasum through the public API at world sizes 1-5, against a float64 numpy reference of the same tree.

The tree (csrc/algorithms/adasum_allreduce.cc): with p' the largest power of two <= size, rank p' + i is
first folded into rank i; then for d = 1, 2, .. the result of ranks [g, g + d) is combined with that of
[g + d, g + 2d). adasum(a, b) = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b per tensor, in float64, the
result rounded to the tensor's type after every combination (as the core stores it). The core sums its
dot products in another order, so results agree within a few units in the last place; orthogonal vectors
(the exact sum) and equal vectors (the vector itself) are compared exactly. Tensors of several scales in
one grouped or fused allreduce check that dot products are per tensor: over the whole buffer they differ.
"""
import numpy as np
import pytest

from coll_data import DType
from mp import WORLD_SIZES, run_ranks

FLOATS = [DType("float16", "float16"), DType("bfloat16", "uint16", True), DType("float32", "float32"),
          DType("float64", "float64")]
ULP = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}


def round_to(name, x):
    """float64 x rounded to the type `name` (bfloat16: through float32, round to nearest even)."""
    x = np.asarray(x, np.float64)
    if name == "bfloat16":
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        return u.astype(np.uint32).view(np.float32).astype(np.float64)
    if name == "float16":
        return x.astype(np.float32).astype(np.float16).astype(np.float64)
    return x.astype(name).astype(np.float64)


def adasum_pair(a, b, name):
    ab, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1 - ab / (2 * aa) if aa > 0 else 1.0
    cb = 1 - ab / (2 * bb) if bb > 0 else 1.0
    return round_to(name, ca * a + cb * b)


def adasum_tree(vectors, name):
    v = list(vectors)
    p2 = 1
    while p2 * 2 <= len(v):
        p2 *= 2
    for i in range(len(v) - p2):
        v[i] = adasum_pair(v[i], v[p2 + i], name)
    d = 1
    while d < p2:
        for g in range(0, p2, 2 * d):
            v[g] = adasum_pair(v[g], v[g + d], name)
        d *= 2
    return v[0]


def tensor_values(rank, t, count):
    """Rank `rank`'s tensor t: a part all ranks share plus one of its own, scaled by 1 + 3t."""
    i = np.arange(count, dtype=np.float64)
    return (1 + 3 * t) * (np.cos(0.11 * i + t) + 0.7 * np.sin(0.37 * i + 1.3 * rank + 0.5 * t))


def check_close(got, want, name, what):
    # float64: the core adds its dot products in another order, which moves the coefficients by more
    # than a float64 ulp (about 1e-15 relative for these sizes)
    tol = max(4 * ULP[name], 1e-13) * float(np.max(np.abs(want))) if want.size else 0
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    assert err <= tol, f"{what}: max error {err:g} > {tol:g}\ngot  {got[:8]}\nwant {want[:8]}"


def body_allreduce():
    import pyhorovod as hvd
    hvd.init()
    n, r, checks = hvd.size(), hvd.rank(), 0
    counts = [5, 0, 17, 1, 64, 1029]
    for dt in FLOATS:
        kw = dt.kwargs()
        inputs = [[round_to(dt.name, tensor_values(q, t, c)) for t, c in enumerate(counts)] for q in range(n)]
        want = [adasum_tree([inputs[q][t] for q in range(n)], dt.name) for t in range(len(counts))]
        mine = [dt.make(x) for x in inputs[r]]
        # one tensor per call
        for t in (1, 3, 5):
            got = dt.values(hvd.allreduce(mine[t], op=hvd.Adasum, name=f"one.{dt.name}.{t}", **kw))
            check_close(got, want[t], dt.name, f"allreduce {dt.name} count={counts[t]}")
            checks += 1
        # small tensors under one name, repeated: cached requests (the inline path would apply to Sum)
        for _ in range(3):
            got = dt.values(hvd.allreduce(mine[0], op=hvd.Adasum, name=f"small.{dt.name}", **kw))
            check_close(got, want[0], dt.name, f"repeated allreduce {dt.name} count={counts[0]}")
            checks += 1
        # grouped: one request per tensor, reduced together, dot products per tensor
        outs = hvd.grouped_allreduce(mine, op=hvd.Adasum, name=f"group.{dt.name}", **kw)
        for t, out in enumerate(outs):
            check_close(dt.values(out), want[t], dt.name, f"grouped {dt.name} tensor {t}")
            checks += 1
        # asynchronous, in place: the engine may fuse them
        bufs = [x.copy() for x in mine]
        handles = [hvd.allreduce_async_(b, op=hvd.Adasum, name=f"async.{dt.name}.{t}", **kw)
                   for t, b in enumerate(bufs)]
        for t, h in enumerate(handles):
            hvd.synchronize(h)
            check_close(dt.values(bufs[t]), want[t], dt.name, f"allreduce_async_ {dt.name} tensor {t}")
            checks += 1
        # exact: orthogonal vectors add up, equal vectors average
        i = np.arange(101)
        v = (i % 13 - 6).astype(np.float64)
        orth = dt.values(hvd.allreduce(dt.make(np.where(i % n == r, v, 0.0)), op=hvd.Adasum, **kw))
        assert np.array_equal(orth, v), (dt.name, orth, v)
        same = dt.values(hvd.allreduce(dt.make(v * 0.25), op=hvd.Adasum, **kw))
        assert np.array_equal(same, v * 0.25), (dt.name, same)
        checks += 2
    # the default prescale/postscale factors apply around the reduction
    v = np.arange(8, dtype=np.float64)
    got = hvd.allreduce(v, op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.5)
    assert np.array_equal(got, v), got
    checks += 1
    for call, text in [(lambda: hvd.allreduce(np.ones(3, np.int32), op=hvd.Adasum), "float16, bfloat16"),
                       (lambda: hvd.reducescatter(np.ones(4, np.float32), op=hvd.Adasum), "Adasum"),
                       (lambda: hvd.allreduce(np.ones(3, bool), op=hvd.Adasum), "not bool")]:
        with pytest.raises(ValueError) as info:
            call()
        assert text in str(info.value), str(info.value)
        checks += 1
    hvd.shutdown()
    return checks


def body_process_set():
    """A process set of the odd ranks and one of the even ranks, each reducing its own members' tensors."""
    import pyhorovod as hvd
    evens, odds = hvd.ProcessSet(list(range(0, 5, 2))), hvd.ProcessSet(list(range(1, 5, 2)))
    hvd.init(process_sets=[evens, odds])
    r = hvd.rank()
    ps = evens if r % 2 == 0 else odds
    members = ps.ranks
    counts = [33, 7]
    inputs = [[tensor_values(q, t, c) for t, c in enumerate(counts)] for q in members]
    outs = hvd.grouped_allreduce([x.copy() for x in inputs[members.index(r)]], op=hvd.Adasum, process_set=ps)
    for t, out in enumerate(outs):
        check_close(out, adasum_tree([x[t] for x in inputs], "float64"), "float64", f"process set {members} t={t}")
    hvd.barrier()  # a rank's shutdown stops every rank: wait until both sets are done
    hvd.shutdown()
    return len(outs)


@pytest.mark.parametrize("size", WORLD_SIZES)
def test_adasum_allreduce(size):
    results = run_ranks(body_allreduce, size, timeout=240)
    assert all(res.value >= 40 for res in results), [res.value for res in results]


def test_adasum_allreduce_over_tcp():
    """The same with shared memory off: every message over TCP loopback (3 ranks: the fold too)."""
    results = run_ranks(body_allreduce, 3, timeout=240, env={"PYHOROVOD_SHM": "0"})
    assert all(res.value >= 40 for res in results), [res.value for res in results]


def test_adasum_process_sets():
    results = run_ranks(body_process_set, 5, timeout=120)
    assert [res.value for res in results] == [2] * 5


def body_optimizer(kind):
    """DistributedOptimizer(op=Adasum) over an SGD or Adam: each step's parameters are start + the Adasum of
    the ranks' local changes. The reference runs the same inner optimizer on a local copy (its change
    depends on the gradients and its state only), allgathers the changes and applies the tree."""
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    n, r, checks = hvd.size(), hvd.rank(), 0
    counts = [40, 3]

    def make_opt(params):
        if kind == "sgd":
            return torch.optim.SGD(params, lr=1.0)
        return torch.optim.Adam(params, lr=0.1)

    params = [torch.nn.Parameter(torch.zeros(c, dtype=torch.float64)) for c in counts]
    local = [torch.nn.Parameter(torch.zeros(c, dtype=torch.float64)) for c in counts]
    opt = hvd.DistributedOptimizer(make_opt(params), named_parameters=[("w", params[0]), ("b", params[1])],
                                   op=hvd.Adasum)
    local_opt = make_opt(local)
    for step in range(3):
        grads = [torch.from_numpy(tensor_values(r + 7 * step, t, c)) for t, c in enumerate(counts)]
        if step == 0 and kind == "sgd":   # exact: orthogonal gradients are summed
            grads = [torch.from_numpy(np.where(np.arange(c) % n == r, 1.0 + np.arange(c), 0.0)) for c in counts]
        start = [p.detach().clone() for p in params]
        before = [q.detach().clone() for q in local]
        for p, q, g in zip(params, local, grads):
            p.grad, q.grad = g.clone(), g.clone()
        local_opt.step()
        deltas = [(q.detach() - b0) for q, b0 in zip(local, before)]
        everyone = [hvd.allgather(d[None], name=f"ref.{step}.{t}").numpy() for t, d in enumerate(deltas)]
        opt.step()
        for t in range(len(counts)):
            want = start[t].numpy() + adasum_tree(list(everyone[t]), "float64")
            got = params[t].detach().numpy()
            if step == 0 and kind == "sgd":
                assert np.array_equal(got, -(1.0 + np.arange(counts[t]))), (got, step)
            tol = 1e-13 * (np.max(np.abs(start[t].numpy())) + np.max(np.abs(everyone[t])))
            assert np.max(np.abs(got - want)) <= tol, (kind, step, t, got[:4], want[:4])
            assert torch.equal(params[t].grad, grads[t]), "the local gradient is left as it was"
            checks += 1
        for q, p in zip(local, params):   # the reference continues from the reduced parameters too
            with torch.no_grad():
                q.copy_(p)
    if n == 1:  # one rank: the wrapped optimizer's own step
        assert all(torch.equal(p, q) for p, q in zip(params, local))
    hvd.shutdown()
    return checks


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_adasum_optimizer(size, kind):
    results = run_ranks(body_optimizer, size, args=(kind,), timeout=180)
    assert [res.value for res in results] == [6] * size
