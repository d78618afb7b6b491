"""pyhorovod.torch collectives: every op x dtype x in/out-of-place x sync/async with exact values, the
backward pass of each differentiable op, and error types/messages. Each launch runs many checks and
returns the list of failures, so that a failing check is named in the assertion message."""
import pytest

import torch_launch

DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]
FLOATS = {"float16", "bfloat16", "float32", "float64"}


class _Checker:
    def __init__(self):
        self.failures = []
        self.count = 0

    def eq(self, label, got, expected):
        import torch
        self.count += 1
        ok = isinstance(got, torch.Tensor) and got.dtype == expected.dtype and got.shape == expected.shape \
            and torch.equal(got, expected)
        if not ok:
            self.failures.append(f"{label}: got {got!r}, expected {expected!r}")

    def true(self, label, cond, detail=""):
        self.count += 1
        if not cond:
            self.failures.append(f"{label}: {detail}")


def _base(shape, r, dt):
    """Small integers (exact in every dtype): base + rank, base cycling 0..3."""
    import torch
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n) % 4 + r).reshape(shape)).to(getattr(torch, dt))


def body_allreduce():
    import torch
    import pyhorovod.torch as hvd
    r, n = hvd.rank(), hvd.size()
    c = _Checker()
    ranks = torch.arange(n)
    for dt in DTYPES:
        tdt = getattr(torch, dt)
        for shape in [(17,), (2, 3), (), (0,)]:
            x = _base(shape, r, dt)
            base = _base(shape, 0, "int64")
            numel = base.numel()
            # Product input: 1s and 2s, the same on every rank (product = value ** n stays small)
            pinput = (torch.arange(max(1, numel)) % 2 + 1)[:numel].reshape(shape)
            if dt == "bool":  # Sum/Max are "or", Min/Product are "and"
                allx = torch.stack([_base(shape, k, dt) for k in range(n)])
                exp = {"Sum": allx.any(0), "Max": allx.any(0), "Min": allx.all(0), "Product": allx.all(0)}
            else:
                exp = {"Sum": base * n + int(ranks.sum()), "Min": base.clone(), "Max": base + (n - 1),
                       "Product": pinput ** n}
            if dt in FLOATS:
                exp["Average"] = (base * n + int(ranks.sum())).to(torch.float64) / n
            for opname, e in exp.items():
                op = getattr(hvd, opname)
                e = e.to(tdt)
                src = pinput.to(tdt) if opname == "Product" and dt != "bool" else x
                label = f"{dt}{list(shape)} {opname}"
                before = src.clone()
                c.eq(label + " out", hvd.allreduce(src, op=op, name=f"a.{label}"), e)
                c.eq(label + " input untouched", src, before)
                c.eq(label + " async", hvd.synchronize(hvd.allreduce_async(src, op=op)), e)
                y = src.clone()
                c.true(label + " in-place returns input", hvd.allreduce_(y, op=op) is y)
                c.eq(label + " in-place", y, e)
                y = src.clone()
                h = hvd.allreduce_async_(y, op=op, name=f"b.{label}")
                c.true(label + " poll", hvd.poll(h) in (True, False))
                out = hvd.synchronize(h)
                c.true(label + " async in-place returns input", out is y)
                c.eq(label + " async in-place", y, e)
            if dt in FLOATS and shape == (17,):
                e = ((base * n + int(ranks.sum())) * 3 * 0.5).to(tdt)
                c.eq(f"{dt} pre/postscale", hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0,
                                                           postscale_factor=0.5), e)
                e = ((base * n + int(ranks.sum())) * 2.0 / n).to(tdt)
                c.eq(f"{dt} average+postscale", hvd.allreduce(x, postscale_factor=2.0), e)
                with pytest.warns(DeprecationWarning):
                    got = hvd.allreduce(x, average=False)
                c.eq(f"{dt} average=False", got, (base * n + int(ranks.sum())).to(tdt))
                # grouped, in/out of place, sync/async
                xs = [x, _base((2, 2), r, dt), _base((5,), r, dt)]
                es = [(_base(t.shape, 0, "int64") * n + int(ranks.sum())).to(tdt) for t in xs]
                for lbl, got in [("grouped", hvd.grouped_allreduce(xs, op=hvd.Sum)),
                                 ("grouped async", hvd.synchronize(hvd.grouped_allreduce_async(xs, op=hvd.Sum)))]:
                    for i, (g, e) in enumerate(zip(got, es)):
                        c.eq(f"{dt} {lbl}[{i}]", g, e)
                ys = [t.clone() for t in xs]
                got = hvd.grouped_allreduce_(ys, op=hvd.Sum, name=f"g.{dt}")
                c.true(f"{dt} grouped in-place identity", all(a is b for a, b in zip(got, ys)))
                for i, (g, e) in enumerate(zip(ys, es)):
                    c.eq(f"{dt} grouped in-place[{i}]", g, e)
                ys = [t.clone() for t in xs]
                hvd.synchronize(hvd.grouped_allreduce_async_(ys, op=hvd.Sum))
                for i, (g, e) in enumerate(zip(ys, es)):
                    c.eq(f"{dt} grouped async in-place[{i}]", g, e)
                # non-contiguous: out of place and in place (written back through the view)
                m = torch.stack([x[:6], x[6:12]]).t()
                em = torch.stack([es[0][:6], es[0][6:12]]).t()
                c.eq(f"{dt} non-contiguous out", hvd.allreduce(m, op=hvd.Sum), em.contiguous())
                hvd.allreduce_(m, op=hvd.Sum)
                c.eq(f"{dt} non-contiguous in-place", m.contiguous(), em.contiguous())
                # fp16 compression: the result comes back in the input's dtype
                got = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
                c.eq(f"{dt} fp16 compression", got, es[0])
    return {"failures": c.failures, "count": c.count}


def body_gather_bcast_a2a_rs():
    import torch
    import pyhorovod.torch as hvd
    r, n = hvd.rank(), hvd.size()
    c = _Checker()
    for dt in DTYPES:
        tdt = getattr(torch, dt)
        # allgather: rank k contributes k+1 rows of value k % 2 (bool-safe) + k // 2
        val = lambda k: (k % 2) if dt == "bool" else k  # noqa: E731
        mine = torch.full((r + 1, 3), val(r)).to(tdt)
        exp = torch.cat([torch.full((k + 1, 3), val(k)) for k in range(n)]).to(tdt)
        c.eq(f"{dt} allgather", hvd.allgather(mine), exp)
        c.eq(f"{dt} allgather async", hvd.synchronize(hvd.allgather_async(mine, name=f"ag.{dt}")), exp)
        zero = torch.empty((0, 2), dtype=tdt)
        c.eq(f"{dt} allgather empty", hvd.allgather(zero), torch.empty((0, 2), dtype=tdt))
        got = hvd.grouped_allgather([mine, mine[:1]])
        c.eq(f"{dt} grouped allgather[0]", got[0], exp)
        c.eq(f"{dt} grouped allgather[1]", got[1], torch.cat([torch.full((1, 3), val(k)) for k in range(n)]).to(tdt))
        got = hvd.synchronize(hvd.grouped_allgather_async([mine]))
        c.eq(f"{dt} grouped allgather async", got[0], exp)
        # broadcast from every root: out of place (input untouched), in place, async
        for root in range(n):
            x = (torch.arange(7) % 2 + 2 * r).to(tdt) if dt != "bool" else torch.tensor([r % 2 == 0] * 7)
            xr = (torch.arange(7) % 2 + 2 * root).to(tdt) if dt != "bool" else torch.tensor([root % 2 == 0] * 7)
            before = x.clone()
            c.eq(f"{dt} broadcast root {root}", hvd.broadcast(x, root), xr)
            c.eq(f"{dt} broadcast input untouched", x, before)
            c.eq(f"{dt} broadcast async", hvd.synchronize(hvd.broadcast_async(x, root)), xr)
            y = x.clone()
            c.true(f"{dt} broadcast_ identity", hvd.broadcast_(y, root) is y)
            c.eq(f"{dt} broadcast_ root {root}", y, xr)
            y = x.clone()
            hvd.synchronize(hvd.broadcast_async_(y, root, name=f"bc.{dt}.{root}"))
            c.eq(f"{dt} broadcast async_ root {root}", y, xr)
        # alltoall with splits: rank r sends j+1 rows of value (r + j) % 2 or 10 r + j to rank j
        v = (lambda a, b: (a + b) % 2) if dt in ("bool",) else (lambda a, b: 10 * a + b) \
            if dt not in ("int8", "uint8") else (lambda a, b: 3 * a + b)
        send = torch.cat([torch.full((j + 1, 2), v(r, j)) for j in range(n)]).to(tdt)
        recv = torch.cat([torch.full((r + 1, 2), v(i, r)) for i in range(n)]).to(tdt)
        out, received = hvd.alltoall(send, splits=[j + 1 for j in range(n)])
        c.eq(f"{dt} alltoall splits", out, recv)
        c.eq(f"{dt} alltoall received_splits", received, torch.full((n,), r + 1, dtype=torch.int32))
        out, received = hvd.synchronize(hvd.alltoall_async(send, splits=torch.arange(1, n + 1)))
        c.eq(f"{dt} alltoall async", out, recv)
        eq_send = torch.cat([torch.full((2, 1), v(r, j)) for j in range(n)]).to(tdt)
        eq_recv = torch.cat([torch.full((2, 1), v(i, r)) for i in range(n)]).to(tdt)
        c.eq(f"{dt} alltoall equal", hvd.alltoall(eq_send), eq_recv)
        # reducescatter (not for bool): rows 2n+1 so the first rank gets one more
        if dt != "bool":
            rows = 2 * n + 1
            x = (torch.arange(rows * 2).reshape(rows, 2) % 5 + r).to(tdt)
            full = (torch.arange(rows * 2).reshape(rows, 2) % 5) * n + n * (n - 1) // 2
            start = r * 2 + min(r, 1)
            block = full[start:start + (3 if r == 0 else 2)]
            c.eq(f"{dt} reducescatter Sum", hvd.reducescatter(x, op=hvd.Sum), block.to(tdt))
            c.eq(f"{dt} reducescatter async", hvd.synchronize(hvd.reducescatter_async(x, op=hvd.Sum)),
                 block.to(tdt))
            got = hvd.grouped_reducescatter([x, x], op=hvd.Sum)
            c.eq(f"{dt} grouped reducescatter", got[1], block.to(tdt))
            if dt in FLOATS:
                c.eq(f"{dt} reducescatter Average", hvd.reducescatter(x), (block.double() / n).to(tdt))
                c.eq(f"{dt} reducescatter scaled",
                     hvd.reducescatter(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25),
                     (block.double() * 0.5).to(tdt))
    hvd.barrier()
    c.true("join returns a rank", hvd.join() in range(n))
    return {"failures": c.failures, "count": c.count}


def body_autograd():
    import torch
    import pyhorovod.torch as hvd
    r, n = hvd.rank(), hvd.size()
    c = _Checker()
    tri = n * (n + 1) / 2            # sum over ranks k of (k + 1)
    w = float(r + 1)                 # rank r's loss is w * sum(output)
    x = torch.ones(4, dtype=torch.float64, requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum) * w).sum().backward()
    c.eq("allreduce Sum grad", x.grad, torch.full((4,), tri, dtype=torch.float64))
    x.grad = None
    (hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5) * w).sum().backward()
    c.eq("allreduce scaled grad", x.grad, torch.full((4,), tri, dtype=torch.float64))
    x.grad = None
    (hvd.allreduce(x) * w).sum().backward()
    c.eq("allreduce Average grad", x.grad, torch.full((4,), tri / n, dtype=torch.float64))
    x.grad = None
    xm = (torch.arange(4, dtype=torch.float64) * (1 if r == n - 1 else 0)).requires_grad_()
    (hvd.allreduce(xm, op=hvd.Max) * w).sum().backward()
    exp = torch.tensor([tri if (r == n - 1 or i == 0) else 0.0 for i in range(4)], dtype=torch.float64)
    c.eq("allreduce Max grad (to the arg-max ranks)", xm.grad, exp)
    # Min: rank 0 holds the minimum alone except at index 0, where every rank ties.
    xn = (torch.arange(4, dtype=torch.float64) + (0 if r == 0 else 10) * (torch.arange(4) > 0)).requires_grad_()
    (hvd.allreduce(xn, op=hvd.Min) * w).sum().backward()
    exp = torch.tensor([tri if (r == 0 or i == 0) else 0.0 for i in range(4)], dtype=torch.float64)
    c.eq("allreduce Min grad (to the arg-min ranks)", xn.grad, exp)
    # Product has no backward pass (Horovod's is wrong): a clear error, raised locally on every rank.
    xp = torch.ones(2, dtype=torch.float64, requires_grad=True)
    _raises(c, "allreduce Product grad", NotImplementedError, "Product",
            lambda: hvd.allreduce(xp, op=hvd.Product).sum().backward())
    ys = hvd.grouped_allreduce([x, x * 2], op=hvd.Sum)
    ((ys[0] + ys[1]) * w).sum().backward()
    c.eq("grouped_allreduce grad", x.grad, torch.full((4,), 3 * tri, dtype=torch.float64))
    # allgather: rank k's loss weights gathered row i by (k + 1) * i
    g = torch.ones((r + 1, 2), requires_grad=True)
    out = hvd.allgather(g)
    coef = torch.arange(out.shape[0], dtype=torch.float32)[:, None] * w
    (out * coef).sum().backward()
    offset = r * (r + 1) // 2
    c.eq("allgather grad", g.grad, (torch.arange(offset, offset + r + 1, dtype=torch.float32)[:, None]
                                    * tri / n).expand(r + 1, 2).contiguous())  # Horovod: averaged
    g.grad = None
    outs = hvd.grouped_allgather([g, g])
    ((outs[0] + outs[1]) * coef).sum().backward()
    c.eq("grouped_allgather grad", g.grad, (torch.arange(offset, offset + r + 1, dtype=torch.float32)[:, None]
                                            * 2 * tri / n).expand(r + 1, 2).contiguous())
    for root in range(n):
        b = torch.ones(3, requires_grad=True)
        (hvd.broadcast(b, root) * w).sum().backward()
        c.eq(f"broadcast grad root {root}", b.grad, torch.full((3,), tri / n if r == root else 0.0))
    a = torch.ones((n * (n + 1) // 2, 2), requires_grad=True)
    out, _ = hvd.alltoall(a, splits=[j + 1 for j in range(n)])
    (out * w).sum().backward()
    c.eq("alltoall grad", a.grad, torch.cat([torch.full((j + 1, 2), float(j + 1)) for j in range(n)]))
    a.grad = None
    (hvd.alltoall(a[:n]) * w).sum().backward()
    exp = torch.zeros_like(a)
    exp[:n] = torch.arange(1, n + 1, dtype=torch.float32)[:, None]
    c.eq("alltoall equal-split grad", a.grad, exp)
    rows = 2 * n + 1
    s = torch.ones((rows, 2), dtype=torch.float64, requires_grad=True)
    (hvd.reducescatter(s, op=hvd.Sum) * w).sum().backward()
    per_row = torch.cat([torch.full((3 if j == 0 else 2, 2), float(j + 1), dtype=torch.float64)
                         for j in range(n)])
    c.eq("reducescatter Sum grad", s.grad, per_row * n)  # Horovod's convention: n * the exact gradient
    s.grad = None
    (hvd.reducescatter(s) * w).sum().backward()
    c.eq("reducescatter Average grad", s.grad, per_row)
    s.grad = None
    outs = hvd.grouped_reducescatter([s, s], op=hvd.Sum)
    ((outs[0] + outs[1]) * w).sum().backward()
    c.eq("grouped_reducescatter grad", s.grad, per_row * 2 * n)
    return {"failures": c.failures, "count": c.count}


def _raises(c, label, exc, fragment, fn):
    c.count += 1
    try:
        fn()
    except exc as e:
        if fragment not in str(e):
            c.failures.append(f"{label}: message {str(e)!r} lacks {fragment!r}")
        return
    except Exception as e:  # noqa: BLE001
        c.failures.append(f"{label}: raised {type(e).__name__}({e}) instead of {exc.__name__}")
        return
    c.failures.append(f"{label}: did not raise")


def body_errors():
    import torch
    import pyhorovod.torch as hvd
    c = _Checker()
    _raises(c, "before init", ValueError, "is not initialized", lambda: hvd.allreduce(torch.ones(1)))
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    t = torch.ones(3)
    _raises(c, "Adasum int", ValueError, "Adasum", lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32),
                                                                          op=hvd.Adasum))
    _raises(c, "Adasum reducescatter", ValueError, "Adasum", lambda: hvd.reducescatter(t, op=hvd.Adasum))
    _raises(c, "Adasum optimizer lr_scaling", ValueError, "Adasum",
            lambda: hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(t)], lr=1), op=hvd.Adasum,
                                             lr_scaling="linear", base_batch_size=1, batch_size=1))
    _raises(c, "op and average", ValueError, "not both", lambda: hvd.allreduce(t, op=hvd.Sum,
                                                                                          average=True))
    _raises(c, "bad op", ValueError, "not a reduction op", lambda: hvd.allreduce(t, op=42))
    _raises(c, "not a tensor", ValueError, "expected a torch.Tensor", lambda: hvd.allreduce([1.0, 2.0]))
    _raises(c, "complex", ValueError, "unsupported tensor dtype",
            lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64)))
    _raises(c, "sparse", ValueError, "sparse", lambda: hvd.allreduce(torch.ones(2).to_sparse()))
    _raises(c, "bool average", ValueError, "Average", lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool)))
    _raises(c, "root out of range", ValueError, "root_rank", lambda: hvd.broadcast(t, n))
    _raises(c, "root not int", ValueError, "root_rank must be an integer", lambda: hvd.broadcast(t, 0.5))
    _raises(c, "splits sum", ValueError, "splits add up to",
            lambda: hvd.alltoall(t, splits=[1] * n if n != 3 else [2] * n))
    _raises(c, "splits count", ValueError, "splits given", lambda: hvd.alltoall(t, splits=[3] + [0] * n))
    _raises(c, "allgather scalar", ValueError, "at least one dimension", lambda: hvd.allgather(torch.tensor(1.0)))
    _raises(c, "bad handle", ValueError, "handle", lambda: hvd.synchronize(123456))
    if n > 1:
        # Deterministic: the other ranks submit "dup" only after rank 0 has tried it twice.
        flag = torch.zeros(1)
        if r == 0:
            h = hvd.allreduce_async(t, name="dup")
            _raises(c, "duplicate name in flight", ValueError, "dup", lambda: hvd.allreduce_async(t, name="dup"))
            hvd.broadcast_(flag, 0, name="dup.go")
        else:
            hvd.broadcast_(flag, 0, name="dup.go")
            h = hvd.allreduce_async(t, name="dup")
        c.eq("dup completes", hvd.synchronize(h), torch.ones(3))
    # mismatches: an error on every rank, and the engine keeps working
    if n > 1:
        _raises(c, "shape mismatch", hvd.HorovodInternalError, "Mismatched",
                lambda: hvd.allreduce(torch.ones(r + 1), name="mm.shape"))
        _raises(c, "dtype mismatch", hvd.HorovodInternalError, "ismatch",
                lambda: hvd.allreduce(torch.ones(2, dtype=torch.float32 if r else torch.float64),
                                      name="mm.dtype"))
        _raises(c, "op mismatch", hvd.HorovodInternalError, "ismatch",
                lambda: hvd.allreduce(torch.ones(2), op=hvd.Sum if r else hvd.Max, name="mm.op"))
        _raises(c, "broadcast root mismatch", hvd.HorovodInternalError, "ismatch",
                lambda: hvd.broadcast(torch.ones(2), r, name="mm.root"))
        c.eq("usable after mismatches", hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(n)))
    return {"failures": c.failures, "count": c.count}


def body_process_sets():
    """After a re-init with a static process set of the even ranks: collectives on the set (root_rank is
    a global rank, as Horovod), a clear error for non-members, and DistributedOptimizer on the set."""
    import torch
    import pyhorovod.torch as hvd
    c = _Checker()
    n = hvd.size()
    if n == 1:  # the only subset of one rank is the global set itself
        return {"failures": [], "count": 0}
    hvd.shutdown()
    evens = hvd.ProcessSet(list(range(0, n, 2)))
    hvd.init(process_sets=[evens])
    r = hvd.rank()
    members = list(range(0, n, 2))
    if r in members:
        c.eq("set allreduce", hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, process_set=evens),
             torch.tensor([float(sum(members))]))
        c.eq("set broadcast from global rank", hvd.broadcast(torch.tensor([float(r)]), members[-1],
                                                             process_set=evens),
             torch.tensor([float(members[-1])]))
        c.eq("set allgather", hvd.allgather(torch.tensor([r]), process_set=evens), torch.tensor(members))
        _raises(c, "root outside the set", ValueError, "not a member",
                lambda: hvd.broadcast(torch.ones(1), 1, process_set=evens) if n > 1 else
                hvd.broadcast(torch.ones(1), 5, process_set=evens))
    else:
        _raises(c, "non-member", ValueError, "not a member",
                lambda: hvd.allreduce(torch.ones(1), process_set=evens))
    w = torch.nn.Parameter(torch.zeros(2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("w", w)], process_set=evens)
    (w * (r + 1)).sum().backward()
    opt.step()
    exp = -sum(m + 1 for m in members) / len(members) if r in members else -(r + 1.0)
    c.eq("optimizer on the set", w.detach(), torch.full((2,), exp))
    hvd.barrier()  # a rank that shuts down ends the job for everybody (as Horovod): finish together
    return {"failures": c.failures, "count": c.count}


def body_all():
    """One launch per world size: the sections run one after another on the same engine; a section
    that raises is recorded with its traceback and the next one still runs."""
    import traceback
    import pyhorovod.torch as hvd
    out = {}
    for name, fn in [("errors", body_errors), ("allreduce", body_allreduce),
                     ("gather_bcast_a2a_rs", body_gather_bcast_a2a_rs), ("autograd", body_autograd),
                     ("process_sets", body_process_sets)]:
        try:
            out[name] = fn()
        except Exception:  # noqa: BLE001 -- reported by the matching test
            out[name] = {"failures": [traceback.format_exc()], "count": 0}
            if not hvd.is_initialized():
                hvd.init()
    hvd.shutdown()
    return out


@pytest.fixture(scope="module", params=[1, 2, 3, 4])
def launched(request):
    # One launch per world size shared with the other torch test files (tests/torch_launch.py).
    return torch_launch.launched(request.param, "ops")


def _check(launched, section, min_count):
    size, results = launched
    assert len(results) == size
    for res in results:
        sec = res.value[section]
        assert sec["failures"] == [], f"rank {res.rank}:\n" + "\n".join(sec["failures"][:40])
        assert sec["count"] >= min_count, sec["count"]


def test_allreduce_every_dtype_op_mode(launched):
    _check(launched, "allreduce", 1000)


def test_allgather_broadcast_alltoall_reducescatter(launched):
    _check(launched, "gather_bcast_a2a_rs", 150)


def test_autograd_backward_of_each_op(launched):
    # 14 checks + one broadcast per root; every rank makes all of them.
    _check(launched, "autograd", 14 + launched[0])
    assert {res.value["autograd"]["count"] for res in launched[1]} == {14 + launched[0]}


@pytest.mark.parametrize("launched", [2, 3, 4], indirect=True)  # a proper subset needs world size >= 2
def test_process_sets(launched):
    size, results = launched
    _check(launched, "process_sets", 2)
    assert max(res.value["process_sets"]["count"] for res in results) == 5


def test_errors(launched):
    _check(launched, "errors", 15 if launched[0] == 1 else 21)
