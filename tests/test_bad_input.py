"""Bad input gets a clear error, and the user's arrays are never harmed.

- Wrong dtypes, non-contiguous or read-only arrays (for in-place ops), roots out of range, alltoall
  splits that do not add up, bad process sets: ValueError on the calling rank, before anything is enqueued
  (the next collective still works, on every rank).
- Shapes, dtypes or roots that differ across ranks: HorovodInternalError on every rank (the engine's
  negotiation), and the engine keeps working.
- Out-of-place ops (allreduce, allgather, broadcast, alltoall, reducescatter) never modify their inputs:
  compared with copies after success and after every kind of failure.
- Arrays freed or resized while an async op runs: the handle table keeps the array alive (`del` + gc is
  safe), and numpy, bytearray and array.array refuse to resize a buffer that is exported, so the engine
  never writes into freed memory. (`ndarray.resize(refcheck=False)` deliberately disables numpy's check and
  is not protected.)
"""
import array
import gc
import time

import numpy as np
import pytest

from mp import run_ranks


def inputs(r, n):
    """Random inputs of every out-of-place op, with their copies."""
    rng = np.random.default_rng(7 + r)
    xs = {"allreduce": rng.integers(-50, 50, (5, 7)).astype(np.float32),
          "allgather": rng.integers(0, 9, (r + 2, 3)).astype(np.int64),
          "broadcast": rng.standard_normal(11),
          "alltoall": np.arange(2 * n * 3, dtype=np.int32).reshape(2 * n, 3) * (r + 1),
          "reducescatter": rng.integers(-9, 9, (2 * n + 1, 2)).astype(np.float64)}
    return xs, {k: v.copy() for k, v in xs.items()}


def run_all(hvd, xs, tag, **kw):
    return [hvd.allreduce(xs["allreduce"], op=hvd.Sum, name=f"{tag}.ar", **kw),
            hvd.allgather(xs["allgather"], name=f"{tag}.ag", **kw),
            hvd.broadcast(xs["broadcast"], root_rank=0, name=f"{tag}.bc", **kw),
            hvd.alltoall(xs["alltoall"], name=f"{tag}.a2a", **kw),
            hvd.reducescatter(xs["reducescatter"], op=hvd.Sum, name=f"{tag}.rs", **kw)]


def assert_unchanged(xs, copies, when):
    for k in xs:
        assert xs[k].dtype == copies[k].dtype and np.array_equal(xs[k], copies[k]), f"{k} input changed {when}"


# ------------------------------------------------------------------ local argument errors

def body_local_errors():
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    xs, copies = inputs(r, n)
    f32 = np.ones(6, np.float32)
    bad = [
        (lambda: hvd.allreduce(np.ones(3, np.complex64)), "unsupported dtype complex64"),
        (lambda: hvd.allreduce(np.array(["a", "b"])), "unsupported dtype <U1"),
        (lambda: hvd.allreduce(np.array([object()])), "unsupported dtype object"),
        (lambda: hvd.allreduce(np.ones(3, ">f4")), "unsupported dtype >f4"),
        (lambda: hvd.allgather(np.ones(3, np.longdouble)), "unsupported dtype float128"),
        (lambda: hvd.allreduce(np.ones(3, np.uint16), dtype="float32"), "4-byte elements"),
        (lambda: hvd.allreduce(np.ones(3, np.float32), dtype="int32"), "conflicts with the array's dtype"),
        (lambda: hvd.allreduce([1.0, 2.0]), "expected a numpy array or a C-contiguous buffer"),
        (lambda: hvd.allreduce(np.ones(10, np.float32)[::2]), "not C-contiguous"),
        (lambda: hvd.allgather(np.ones((4, 3), np.float32).T), "not C-contiguous"),
        (lambda: hvd.broadcast(np.asfortranarray(np.ones((3, 4))), root_rank=0), "not C-contiguous"),
        (lambda: hvd.allreduce_(np.ones(4, np.float32)[:0:-1]), "not C-contiguous"),
        (lambda: hvd.allreduce_(np.frombuffer(b"\0" * 16, np.float32)), "read-only"),
        (lambda: hvd.broadcast(f32, root_rank=n), f"root_rank={n} is out of range"),
        (lambda: hvd.broadcast(f32, root_rank=-1), "root_rank=-1 is out of range"),
        (lambda: hvd.broadcast(f32, root_rank=1.0), "root_rank must be an integer"),
        (lambda: hvd.broadcast_(f32, root_rank=True), "root_rank must be an integer"),
        (lambda: hvd.alltoall(np.ones((n + 1, 2), np.float32)) if n > 1 else hvd.alltoall(np.float32(1)),
         "must divide evenly" if n > 1 else "at least one dimension"),
        (lambda: hvd.alltoall(np.ones((4, 2), np.float32), splits=[5] + [0] * (n - 1)), "add up to 5"),
        (lambda: hvd.alltoall(np.ones((4, 2), np.float32), splits=[4] * (n + 1)), f"{n + 1} splits given"),
        (lambda: hvd.alltoall(np.ones((4, 2), np.float32), splits=[-1, 5] + [0] * (n - 2) if n > 1 else [-1]),
         "non-negative"),
        (lambda: hvd.alltoall(np.ones((4, 2), np.float32), splits=[2.5] * n), "splits must be integers"),
        (lambda: hvd.allgather(np.float32(3)), "at least one dimension"),
        (lambda: hvd.reducescatter(np.ones((), np.float32)), "at least one dimension"),
        (lambda: hvd.allreduce(np.ones(3, bool), op=hvd.Average), "not defined for bool"),
        (lambda: hvd.allreduce(np.ones(3, np.int32), op=hvd.Adasum), "op=Adasum needs a float16"),
        (lambda: hvd.reducescatter(f32, op=hvd.Adasum), "Adasum is an allreduce"),
        (lambda: hvd.allreduce(f32, op=17), "not a reduction op"),
        (lambda: hvd.allreduce(f32, op=hvd.Sum, average=True), "either op= or the deprecated average="),
        (lambda: hvd.synchronize(123456), "unknown or already synchronized handle"),
    ]
    for i, (call, text) in enumerate(bad):
        with pytest.raises(ValueError) as info:
            call()
            print(f"case {i} ({text}) did not raise")
        assert text in str(info.value), (i, text, str(info.value))
    # Nothing was enqueued: the same unnamed collectives still line up on every rank, with exact results.
    out = run_all(hvd, xs, "after")
    assert np.array_equal(out[0], sum(inputs(q, n)[0]["allreduce"] for q in range(n)))
    assert_unchanged(xs, copies, "by successful ops")
    hvd.shutdown()
    return len(bad)


@pytest.mark.parametrize("size", [1, 3])
def test_bad_arguments_are_value_errors_before_anything_is_sent(size):
    results = run_ranks(body_local_errors, size, timeout=90)
    assert results[0].value == 30


# ------------------------------------------------------------------ disagreements across ranks

def body_mismatch():
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    xs, copies = inputs(r, n)
    odd = r == n - 1
    cases = [
        (lambda: hvd.allreduce(xs["allreduce"] if not odd else xs["allreduce"][:4], name="m.shape"),
         "Mismatched allreduce tensor shapes"),
        (lambda: hvd.allreduce(xs["allreduce"] if not odd else xs["allreduce"].astype(np.float64), name="m.dt"),
         "Mismatched data types"),
        (lambda: hvd.broadcast(xs["broadcast"], root_rank=1 if odd else 0, name="m.root"),
         "Mismatched broadcast root ranks"),
        (lambda: hvd.allgather(xs["allgather"] if not odd else np.ascontiguousarray(xs["allgather"][:, :2]),
                               name="m.ag"),
         "Mismatched allgather tensor shapes"),
        (lambda: hvd.reducescatter(xs["reducescatter"] if not odd else xs["reducescatter"][1:], name="m.rs"),
         "Mismatched reducescatter tensor shapes"),
        (lambda: hvd.alltoall(xs["alltoall"] if not odd else np.ascontiguousarray(xs["alltoall"][:, :1]), name="m.a2a"),
         "Mismatched alltoall"),
    ]
    seen = []
    for call, text in cases:
        with pytest.raises(hvd.HorovodInternalError) as info:
            call()
        assert text in str(info.value), str(info.value)
        seen.append(str(info.value))
        assert_unchanged(xs, copies, f"after a failed op ({text})")
    # A timed-out out-of-place op leaves its input alone too (the last rank never submits it).
    if not odd:
        with pytest.raises(hvd.HorovodTimeoutError):
            run_all(hvd, xs, "late", timeout=0.5)
        assert_unchanged(xs, copies, "after a timeout")
    out = run_all(hvd, xs, "ok")   # and the engine still works, with exact results
    want = [sum(inputs(q, n)[0]["allreduce"] for q in range(n)),
            np.concatenate([inputs(q, n)[0]["allgather"] for q in range(n)]), inputs(0, n)[0]["broadcast"]]
    for got, expected in zip(out, want):
        assert np.array_equal(got, expected)
    assert_unchanged(xs, copies, "after success")
    hvd.shutdown()
    return seen


def test_disagreements_across_ranks_fail_everywhere_and_leave_inputs_alone():
    run_ranks(body_mismatch, 3, timeout=120)


# ------------------------------------------------------------------ buffers freed or resized while in flight

def body_lifetime():
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    if r == 1:
        time.sleep(0.5)   # so rank 0's ops are surely still in flight when it meddles with its buffers
    count = 1 << 18
    want = np.arange(count, dtype=np.float32) * n

    # 1. The only user reference is deleted and garbage collected: the handle keeps the array alive.
    x = np.arange(count, dtype=np.float32)
    h = hvd.allreduce_async(x, op=hvd.Sum, name="freed")
    h_ip = hvd.allreduce_async_(np.arange(count, dtype=np.float32), op=hvd.Sum, name="freed.inplace")
    del x
    gc.collect()
    junk = [np.full(count, -7, np.float32) for _ in range(8)]   # would reuse freed memory
    assert np.array_equal(hvd.synchronize(h), want)
    assert np.array_equal(hvd.synchronize(h_ip), want)
    del junk

    # 2. Resizing an exported buffer is refused while the op runs, allowed after it.
    y = np.arange(count, dtype=np.float32)
    h = hvd.allreduce_async_(y, op=hvd.Sum, name="resized")
    with pytest.raises(ValueError, match="cannot resize"):
        y.resize((2 * count,))
    assert np.array_equal(hvd.synchronize(h), want) and np.array_equal(y, want)
    del h
    gc.collect()
    y.resize((2 * count,), refcheck=True)   # once synchronized, nothing else references it

    b = bytearray(np.arange(64, dtype=np.uint8).tobytes())
    h = hvd.allreduce_async_(b, op=hvd.Max, name="bytearray")
    with pytest.raises(BufferError):
        b.extend(b"more")
    hvd.synchronize(h)
    b.extend(b"more")

    a = array.array("f", range(100))
    h = hvd.allreduce_async(a, op=hvd.Sum, name="array.array")
    with pytest.raises(BufferError):
        a.append(1.0)
    assert np.array_equal(hvd.synchronize(h), np.arange(100, dtype=np.float32) * n)
    a.append(1.0)
    hvd.shutdown()


def test_buffers_freed_or_resized_during_an_async_op_are_safe():
    run_ranks(body_lifetime, 2, timeout=90)


# ------------------------------------------------------------------ the same through pyhorovod.torch

def body_torch():
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    for bad, text in [(lambda: hvd.allreduce(torch.ones(3, dtype=torch.complex64)), "unsupported tensor dtype"),
                      (lambda: hvd.allreduce(torch.ones(3).to_sparse()), "tensors are not supported"),
                      (lambda: hvd.allreduce([1.0, 2.0]), "expected a torch.Tensor"),
                      (lambda: hvd.broadcast(torch.ones(3), root_rank=n), "root_rank"),
                      (lambda: hvd.alltoall(torch.ones(4, 2), splits=[5] + [0] * (n - 1)), "5")]:
        with pytest.raises(ValueError) as info:
            bad()
        assert text in str(info.value), str(info.value)
    # Non-contiguous tensors: copied for the core; the out-of-place input is unchanged, the in-place one
    # receives the result through its strides.
    t = (torch.arange(20.0).reshape(4, 5) * (r + 1)).t()
    assert not t.is_contiguous()
    before = t.clone()
    total = (torch.arange(20.0).reshape(4, 5) * (n * (n + 1) // 2)).t()
    assert torch.equal(hvd.allreduce(t, op=hvd.Sum, name="nc"), total) and torch.equal(t, before)
    assert hvd.allreduce_(t, op=hvd.Sum, name="nc_") is t and torch.equal(t, total)
    # A shape that differs across ranks fails everywhere; the out-of-place input is untouched.
    x = torch.arange(6.0 + (r == n - 1)) * (r + 1)
    x0 = x.clone()
    with pytest.raises(hvd.HorovodInternalError, match="Mismatched allreduce tensor shapes"):
        hvd.allreduce(x, name="shape")
    assert torch.equal(x, x0)
    hvd.shutdown()


def test_torch_tensors_bad_input_and_non_contiguous():
    run_ranks(body_torch, 2, timeout=90)


def test_every_collective_before_init_says_so():
    # In a fresh interpreter: before init() the set's ranks are unknown, and no check against them (a root,
    # a split count, divisibility) may answer in place of "not initialized".
    import subprocess
    import sys
    code = """
import numpy as np, pyhorovod as hvd
calls = {
    "allreduce": lambda: hvd.allreduce(np.ones(4)),
    "allgather": lambda: hvd.allgather(np.ones(4)),
    "broadcast": lambda: hvd.broadcast(np.ones(4), 0),
    "alltoall": lambda: hvd.alltoall(np.ones(4)),
    "alltoall with splits": lambda: hvd.alltoall(np.ones(4), splits=[4]),
    "reducescatter": lambda: hvd.reducescatter(np.ones(4)),
    "allreduce_async": lambda: hvd.allreduce_async(np.ones(4)),
}
for what, call in calls.items():
    try:
        call()
    except ValueError as e:
        assert "is not initialized" in str(e), (what, e)
    else:
        raise AssertionError(what + " ran before init()")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
