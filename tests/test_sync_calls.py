"""Prepared synchronous calls (pyhorovod/_sync_calls.py, csrc/bindings/bind_sync_call.cc): a blocking
numpy allreduce made before with the same name, op and scales hands its array to a prepared _core.SyncCall.
Checked over real processes with exact values: the prepared call is taken (counted), and a changed shape,
dtype, op, name or in-place form still gets the right result (a new prepared call); an array that does
not fit (non-contiguous, read-only in place) still gets the full path's ValueError; a rank changing the
shape alone still gets the mismatch error on every rank; another thread holding the synchronous name is
still refused. The SyncCall's own fit check, its builtin-function entry and its errors are tested directly at size 1."""
import threading

import numpy as np
import pytest

from mp import run_ranks


def _count_prepared_runs():
    """Wraps each prepared call that _sync_calls files, to count the calls that took one (it returned an
    array)."""
    from pyhorovod import _sync_calls
    hits = [0]
    prepare = _sync_calls.prepare

    def counting_prepare(key, *args, **kwargs):
        prepare(key, *args, **kwargs)
        call = _sync_calls.prepared.get(key)
        if call is not None:
            def counted(tensor, call=call):
                out = call(tensor)
                hits[0] += out is not None
                return out
            _sync_calls.prepared[key] = counted
    _sync_calls.prepare = counting_prepare
    return hits


def body_changes(iterations):
    import pyhorovod as hvd
    from pyhorovod import _sync_calls
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    hits = _count_prepared_runs()
    tri = n * (n + 1) // 2
    streams = [  # (array of this rank, op, name, in place, expected)
        (np.full(1, r + 1, np.float32), hvd.Sum, None, False, np.full(1, tri, np.float32)),
        (np.full(3, r + 1, np.float32), hvd.Sum, None, False, np.full(3, tri, np.float32)),     # shape
        (np.full(3, r + 1, np.int64), hvd.Sum, None, False, np.full(3, tri, np.int64)),         # dtype
        (np.full(3, r + 1, np.int64), hvd.Max, None, False, np.full(3, n, np.int64)),           # op
        (np.full(3, r + 1, np.int64), hvd.Max, "m", False, np.full(3, n, np.int64)),            # name
        (np.full((2, 2), r + 1, np.float64), None, "m", False, np.full((2, 2), tri / n)),       # Average
        (np.full(1, r + 1, np.float32), hvd.Sum, None, True, np.full(1, tri, np.float32)),      # in place
        (np.full(1, r + 1, np.float32), hvd.Sum, None, False, np.full(1, tri, np.float32)),     # back
    ]
    for x, op, name, inplace, want in streams:
        for i in range(iterations):
            arg = x.copy()
            got = (hvd.allreduce_ if inplace else hvd.allreduce)(arg, op=op, name=name)
            assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), (x, op, i)
            assert (got is arg) == inplace
            assert np.array_equal(arg, want if inplace else x)       # out of place: the input untouched
    # Every stream's first call takes the full path; each later one the prepared call.
    assert hits[0] == len(streams) * (iterations - 1), hits
    # Arrays the prepared call does not fit get the full path's errors.
    x = np.full(4, 1.0, np.float32)
    hvd.allreduce(x, op=hvd.Sum)                                      # prepares float32 (4,)
    with pytest.raises(ValueError, match="not C-contiguous"):
        hvd.allreduce(np.full(8, 1.0, np.float32)[::2], op=hvd.Sum)   # same shape as x, strided
    hvd.allreduce_(x, op=hvd.Sum)
    x.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        hvd.allreduce_(x, op=hvd.Sum)
    # A rank changing the shape alone: the mismatch error on every rank, then the stream goes on.
    y = np.full(2, r + 1, np.float32)
    for _ in range(3):
        assert np.array_equal(hvd.allreduce(y, op=hvd.Sum, name="s"), np.full(2, tri, np.float32))
    with pytest.raises(Exception, match="Mismatched allreduce tensor shapes"):
        hvd.allreduce(np.ones(3 if r == n - 1 else 2, np.float32), op=hvd.Sum, name="s")
    assert np.array_equal(hvd.allreduce(y, op=hvd.Sum, name="s"), np.full(2, tri, np.float32))
    # This thread's own unnamed asynchronous calls (a barrier, a handle) do not keep later unnamed calls
    # off their prepared calls.
    hvd.barrier()
    hvd.synchronize(hvd.allreduce_async(np.ones(2, np.float32), op=hvd.Sum))
    before = hits[0]
    for _ in range(3):
        assert np.array_equal(hvd.allreduce(np.full(4, 1.0, np.float32), op=hvd.Sum), np.full(4, n, np.float32))
    assert hits[0] == before + 3, (before, hits)
    # While another thread holds the reusable synchronous name, an unnamed call is refused (not run).
    from pyhorovod import _api, _core
    before = hits[0]
    refused = []
    held = threading.Event()
    release = threading.Event()

    def holder():
        _api._claim_sync_name(_core.ALLREDUCE, 0)
        held.set()
        release.wait(30)
        _api._sync_names_busy.pop((_core.ALLREDUCE, 0), None)
    t = threading.Thread(target=holder)
    t.start()
    held.wait(30)
    try:
        hvd.allreduce(np.full(4, 1.0, np.float32), op=hvd.Sum)      # fits the prepared call
    except ValueError as e:
        refused.append(str(e))
    release.set()
    t.join(30)
    assert len(refused) == 1 and "name=" in refused[0] and hits[0] == before, (refused, hits)
    assert _sync_calls.prepared
    # A loop of one call finds its prepared call by identity (_numpy_allreduce._last); a changed shape
    # under the same arguments misses it, takes the full path and is prepared anew.
    from pyhorovod import _numpy_allreduce
    z = np.full(5, r + 1, np.int32)
    for length in (5, 5, 5, 7, 7, 5):
        before = hits[0]
        got = hvd.allreduce(z[:length] if length <= 5 else np.full(7, r + 1, np.int32), op=hvd.Sum, name="id")
        assert np.array_equal(got, np.full(length, tri, np.int32)), (length, got)
    assert hits[0] == before and _numpy_allreduce._last[5] is None   # the shape change: full path, no memo
    for i in range(2):   # the dict's new call, then the same found by identity
        assert np.array_equal(hvd.allreduce(z, op=hvd.Sum, name="id"), np.full(5, tri, np.int32))
        assert hits[0] == before + 1 + i and _numpy_allreduce._last[0] == "id"
    hvd.shutdown()
    assert not _sync_calls.prepared  # the cache belongs to the engine that is gone
    assert _numpy_allreduce._last[5] is None
    hvd.init()   # a new engine: nothing prepared for the old one is taken
    for _ in range(3):
        assert np.array_equal(hvd.allreduce(z, op=hvd.Sum, name="id"), np.full(5, tri, np.int32))
    hvd.shutdown()
    return hits[0]


def body_broadcast(iterations):
    """Blocking broadcasts take prepared calls too (the engine carries them in its express round): exact
    values from every root, in place or not, named or not, with changes of root, dtype and shape."""
    import pyhorovod as hvd
    from pyhorovod import _sync_calls
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    hits = _count_prepared_runs()
    streams = []   # (array of this rank, root, name, in place, expected)
    for root in range(n):
        streams.append((np.full(2, 10 * r + 1, np.float32), root, None, False, np.full(2, 10 * root + 1, np.float32)))
    streams += [
        (np.arange(3, dtype=np.int64) + r, n - 1, "b", False, np.arange(3, dtype=np.int64) + n - 1),
        (np.full((2, 2), r, np.float64), 0, "b", True, np.zeros((2, 2))),                    # in place, new shape
        (np.full(64, r, np.uint8), n - 1, None, True, np.full(64, n - 1, np.uint8)),
        (np.full(1000, r, np.float32), 0, None, False, np.zeros(1000, np.float32)),          # head and tail
        (np.full(1200, r, np.float32), 0, None, False, np.zeros(1200, np.float32)),          # above the inline size
    ]
    for x, root, name, inplace, want in streams:
        for i in range(iterations):
            arg = x + i if x.dtype != np.uint8 else x.copy()
            expect = want + i if x.dtype != np.uint8 else want
            got = (hvd.broadcast_ if inplace else hvd.broadcast)(arg, root, name=name)
            assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, expect), (x, root, i)
            assert (got is arg) == inplace
    assert hits[0] == len(streams) * (iterations - 1), hits
    # A root out of range is still refused after a prepared call for a valid one.
    hvd.broadcast(np.ones(2, np.float32), 0)
    with pytest.raises(ValueError, match="root_rank"):
        hvd.broadcast(np.ones(2, np.float32), n)
    with pytest.raises(ValueError, match="root_rank"):
        hvd.broadcast(np.ones(2, np.float32), True)
    assert _sync_calls.prepared
    hvd.shutdown()
    return hits[0]


def body_exchange(iterations):
    """Blocking allgather, alltoall and reducescatter take prepared calls: exact values, ranks with
    different first dimensions (allgather), uneven blocks (reducescatter), another rank changing its shape
    (the engine's result says the new gathered shape), and alltoall with splits still on its full path."""
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    hits = _count_prepared_runs()
    for i in range(iterations):
        mine = np.full((r + 1, 2), r + i, np.float32)                     # rank r has r+1 rows
        got = hvd.allgather(mine, name="g")
        want = np.concatenate([np.full((k + 1, 2), k + i, np.float32) for k in range(n)])
        assert got.dtype == np.float32 and np.array_equal(got, want), (i, got)
        rows = 2 if (i >= 3 and r == 0) else 1                             # rank 0 grows from call 3 on
        got = hvd.allgather(np.full(rows, 7 * r + i, np.int64))
        want = np.concatenate([np.full(2 if (i >= 3 and k == 0) else 1, 7 * k + i, np.int64) for k in range(n)])
        assert np.array_equal(got, want), (i, got)
        x = np.arange(3 * n, dtype=np.float64).reshape(n, 3) + 100 * r + i  # row j goes to rank j
        for name in ("t", None):
            got = hvd.alltoall(x, name=name)
            want = np.stack([np.arange(3 * r, 3 * r + 3, dtype=np.float64) + 100 * k + i for k in range(n)])
            assert np.array_equal(got, want), (i, name, got)
        y = np.arange(n + 1, dtype=np.int32) + r + i                       # n+1 rows: rank 0 keeps two
        got = hvd.reducescatter(y, op=hvd.Sum, name="rs")
        full = sum(np.arange(n + 1, dtype=np.int32) + k + i for k in range(n))
        start = 0 if r == 0 else r + 1
        assert got.dtype == np.int32 and np.array_equal(got, full[start:start + (2 if r == 0 else 1)]), (i, got)
        z = np.full(n, 2.0 * (r + 1), np.float32)
        got = hvd.reducescatter(z, prescale_factor=0.5)                    # Average of r+1: (n+1)/2
        assert np.array_equal(got, np.full(1, (n + 1) / 2, np.float32)), (i, got)
    # allgather's second stream changed shape once on rank 0 (a new prepared call there, a cached one
    # elsewhere); every other stream took the prepared call from its second call on.
    assert hits[0] >= 5 * (iterations - 1), hits
    out, received = hvd.alltoall(np.arange(n, dtype=np.int64), splits=[1] * n, name="t")   # splits: full path
    assert np.array_equal(out, np.full(n, r, np.int64)) and received.tolist() == [1] * n
    hvd.shutdown()
    return hits[0]


@pytest.mark.parametrize("size", [2, 3])
def test_prepared_exchanges_exact(size):
    run_ranks(body_exchange, size, timeout=180, args=(6,))


def body_torch(iterations):
    """pyhorovod.torch's blocking calls on contiguous CPU tensors take the same prepared calls, named or
    not; a tensor that needs a gradient, a bfloat16 one, a strided one and an alltoall with splits keep
    their full paths, with exact values either way."""
    import torch

    import pyhorovod.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    hits = _count_prepared_runs()
    tri = n * (n + 1) // 2
    for i in range(iterations):
        x = torch.full((3,), float(r + 1 + i))
        assert torch.equal(hvd.allreduce(x, op=hvd.Sum, name="a"), torch.full((3,), float(tri + n * i)))
        assert torch.equal(x, torch.full((3,), float(r + 1 + i)))                # input untouched
        y = torch.full((2,), r + i, dtype=torch.int64)
        assert hvd.allreduce_(y, op=hvd.Max, name="a_") is y and torch.equal(y, torch.full((2,), n - 1 + i))
        b = torch.full((4,), float(10 * r + i))
        assert torch.equal(hvd.broadcast(b, n - 1, name="b"), torch.full((4,), float(10 * (n - 1) + i)))
        assert hvd.broadcast_(b, 0, name="b_") is b and torch.equal(b, torch.full((4,), float(i)))
        g = hvd.allgather(torch.full((r + 1,), r + i, dtype=torch.int32), name="g")
        assert torch.equal(g, torch.cat([torch.full((k + 1,), k + i, dtype=torch.int32) for k in range(n)]))
        t = hvd.alltoall(torch.arange(n, dtype=torch.float64) + 10 * r + i, name="t")
        assert torch.equal(t, torch.tensor([10.0 * k + i + r for k in range(n)], dtype=torch.float64))
        s = hvd.reducescatter(torch.full((n,), float(r + i)), op=hvd.Sum, name="s")
        assert torch.equal(s, torch.full((1,), float(n * (n - 1) // 2 + n * i)))
        u = hvd.allreduce(torch.full((2,), float(r + i)), op=hvd.Sum)           # unnamed
        assert torch.equal(u, torch.full((2,), float(n * (n - 1) // 2 + n * i)))
        v = hvd.alltoall(torch.full((n,), float(r + i)))                        # unnamed
        assert torch.equal(v, torch.arange(n, dtype=torch.float32) + i)
    assert hits[0] == 9 * (iterations - 1), hits
    before = hits[0]
    w = torch.full((2,), float(r + 1), requires_grad=True)                     # autograd: full path
    out = hvd.allreduce(w, op=hvd.Sum, name="w")
    out.sum().backward()
    assert torch.equal(out.detach(), torch.full((2,), float(tri))) and torch.equal(w.grad, torch.full((2,), float(n)))
    for _ in range(3):
        h = torch.full((2,), 1.5, dtype=torch.bfloat16)                         # no numpy view: full path
        assert torch.equal(hvd.allreduce(h, op=hvd.Sum, name="h"), torch.full((2,), 1.5 * n, dtype=torch.bfloat16))
        z = (torch.arange(8.0) + r)[::2]                                        # strided: full path
        assert torch.equal(hvd.allreduce(z, op=hvd.Sum, name="z"), torch.arange(8.0)[::2] * n + n * (n - 1) // 2)
        got = hvd.alltoall(torch.full((n,), float(r)), splits=[1] * n)[0]       # splits: full path
        assert torch.equal(got, torch.arange(n, dtype=torch.float32))
    assert hits[0] == before, hits
    hvd.shutdown()


@pytest.mark.parametrize("size", [2, 3])
def test_prepared_torch_calls(size):
    run_ranks(body_torch, size, timeout=180, args=(5,))


def body_torch_one_tensor():
    """A loop of blocking calls on one tensor takes its remembered numpy view (torch/_prepared.py) only
    while the tensor keeps its memory, shape and dtype: shrunk in place (same memory), given another
    dtype over the same memory, or another storage, it gets a new view, with exact values."""
    import torch

    import pyhorovod.torch as hvd
    from pyhorovod.torch import _prepared
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    tri = n * (n + 1) // 2
    hits = _count_prepared_runs()
    t = torch.zeros(4)
    for i in range(4):
        t.fill_(float(r + 1 + i))
        assert hvd.allreduce_(t, op=hvd.Sum, name="m") is t and torch.equal(t, torch.full((4,), float(tri + n * i)))
    assert _prepared._last_view[0] is t and hits[0] == 3, hits       # the view remembered, then taken
    ptr = t.data_ptr()
    t.resize_(2)                                                        # the same memory, a smaller shape
    assert t.data_ptr() == ptr
    t.fill_(float(r + 1))
    assert torch.equal(hvd.allreduce_(t, op=hvd.Sum, name="m"), torch.full((2,), float(tri)))
    assert hits[0] == 3 and _prepared._last_view[2] == (2,)             # (4,)'s prepared call did not fit
    t.data = t.view(torch.int32)                                        # another dtype over the same memory
    assert t.data_ptr() == ptr and t.shape == (2,)
    # Read as float32 bits, small integers are denormals, which add like integers; these are normal numbers,
    # whose float sum is not their integer sum: a float32 view would show here.
    t.fill_((r + 1) << 24)
    assert torch.equal(hvd.allreduce_(t, op=hvd.Sum, name="m"), torch.full((2,), tri << 24, dtype=torch.int32))
    t.data = torch.full((2,), r + 7, dtype=torch.int32)                # another storage
    assert torch.equal(hvd.allreduce_(t, op=hvd.Sum, name="m"), torch.full((2,), 7 * n + tri - n, dtype=torch.int32))
    big = torch.zeros(_prepared._VIEW_MEMO_BYTES // 4 + 1)             # too large to be remembered
    hvd.allreduce_(big, op=hvd.Sum, name="big")
    assert _prepared._last_view[0] is t
    hvd.shutdown()


@pytest.mark.parametrize("size", [2, 3])
def test_prepared_torch_calls_on_one_tensor(size):
    run_ranks(body_torch_one_tensor, size, timeout=120)


@pytest.mark.parametrize("size", [2, 3, 4])
def test_prepared_broadcasts_exact_from_every_root(size):
    results = run_ranks(body_broadcast, size, timeout=180, args=(6,))
    assert len({res.value for res in results}) == 1


@pytest.mark.parametrize("size", [2, 3])
def test_prepared_calls_are_taken_and_changes_still_work(size):
    results = run_ranks(body_changes, size, timeout=180, args=(6,))
    assert len({res.value for res in results}) == 1


def body_fit():
    import pyhorovod as hvd
    from pyhorovod import _core, basics
    hvd.init()
    e = basics.engine()
    ex = np.zeros(3, np.float32)
    call = _core.SyncCall(e, _core.ALLREDUCE, "fit", _core.FLOAT32, ex, _core.SUM, 2.0, 1.0, 0, 0, 0.0, False)
    x = np.arange(3, dtype=np.float32)
    out = call(x)
    assert out is not x and out.dtype == np.float32 and out.tolist() == [0.0, 2.0, 4.0]   # prescale 2
    assert x.tolist() == [0.0, 1.0, 2.0]
    entry = call.entry()            # the same call as a builtin function, which keeps the SyncCall alive
    del call
    assert entry(x + 1).tolist() == [2.0, 4.0, 6.0] and entry(np.zeros(2, np.float32)) is None
    call = entry
    for other in (np.arange(3, dtype=np.float64), np.arange(4, dtype=np.float32),
                  np.arange(3, dtype=np.float32).reshape(1, 3), np.arange(6, dtype=np.float32)[::2],
                  np.arange(3, dtype=">f4"), [0.0, 1.0, 2.0], None):
        assert call(other) is None, other
    inplace = _core.SyncCall(e, _core.ALLREDUCE, "fit2", _core.FLOAT32, ex, _core.SUM, 1.0, 3.0, 0, 0, 0.0, True)
    y = np.ones(3, np.float32)
    assert inplace(y) is y and y.tolist() == [3.0, 3.0, 3.0]                              # postscale 3
    y.flags.writeable = False
    assert inplace(y) is None
    with pytest.raises(_core.InvalidArgumentError, match="op_type"):
        _core.SyncCall(e, _core.BARRIER, "no", _core.FLOAT32, ex, _core.SUM, 1.0, 1.0, 0, 0, 0.0, False)
    with pytest.raises(_core.InvalidArgumentError, match="in place"):
        _core.SyncCall(e, _core.ALLGATHER, "no", _core.FLOAT32, ex, _core.SUM, 1.0, 1.0, 0, 0, 0.0, True)
    with pytest.raises(_core.InvalidArgumentError, match="out_shape"):
        _core.SyncCall(e, _core.ALLREDUCE, "no", _core.FLOAT32, ex, _core.SUM, 1.0, 1.0, 0, 0, 0.0, False, [1])
    gather = _core.SyncCall(e, _core.ALLGATHER, "g", _core.FLOAT32, ex, _core.SUM, 1.0, 1.0, 0, 0, 0.0, False)
    got = gather(x)                       # one rank: the gathered array is its own, in a new array
    assert got.dtype == np.float32 and got.tolist() == [0.0, 1.0, 2.0] and got.base is not x
    with pytest.raises(_core.InvalidArgumentError, match="needs a name"):
        _core.SyncCall(e, _core.ALLREDUCE, "", _core.FLOAT32, ex, _core.SUM, 1.0, 1.0, 0, 0, 0.0, False)
    # An unnamed call's entry claims the synchronous name around the call (busy: claim -> thread ident).
    me, other = threading.get_ident(), threading.get_ident() + 1
    claim = (_core.ALLREDUCE, 0)
    busy, by_thread = {}, {}
    claiming = _core.SyncCall(e, _core.ALLREDUCE, "u", _core.FLOAT32, ex, _core.SUM, 1.0, 1.0, 0, 0, 0.0,
                              False).entry(busy, by_thread, claim)
    assert claiming(x).tolist() == [0.0, 1.0, 2.0] and busy == {}            # claimed, run, released
    busy[claim] = other
    assert claiming(x) is None and busy == {claim: other}                      # another thread holds it
    busy[claim] = me
    assert claiming(x) is not None and busy == {}                              # ours: run, then popped
    for threads, runs in (({other: {}}, False), ({me: {}}, True), ({me: {}, other: {}}, False)):
        by_thread.clear()
        by_thread.update(threads)
        assert (claiming(x) is not None) == runs and busy == {}, threads       # others' unnamed requests
    by_thread.clear()
    assert claiming(np.zeros(2, np.float32)) is None and busy == {}            # does not fit: released
    with pytest.raises(_core.InvalidArgumentError, match="dicts"):
        _core.SyncCall(e, _core.ALLREDUCE, "v", _core.FLOAT32, ex, _core.SUM, 1.0, 1.0, 0, 0, 0.0,
                       False).entry([], by_thread, claim)
    hvd.shutdown()
    with pytest.raises(_core.ShutdownError):   # the engine is gone: its errors come through the entry too
        entry(x)
    with pytest.raises(_core.ShutdownError):
        claiming(x)
    assert busy == {}                          # an error releases the claim too


def test_sync_call_fits_only_the_array_it_was_prepared_for():
    run_ranks(body_fit, 1, timeout=60)
