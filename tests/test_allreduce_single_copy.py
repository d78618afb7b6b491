"""The single-copy allreduce (csrc/algorithms/direct_allreduce.cc) and the vote that chooses it over the ring
(csrc/engine/copy_path_vote.h), over real processes. Each rank's policy comes from
PYHOROVOD_ALLREDUCE_SINGLE_COPY (`single` / `ring` force its vote, `off` never votes, `auto` measures); the
engine's statistics line says how many large allreduces ran as single copies and how many votes a rank
sent. Every result is checked exactly: every op, the dtypes numpy has, in place and out of place, fused
tensors, counts that do not split evenly, a process set, and a rank that joined; float32 sums of random
values are compared bit for bit with the sum taken in rank order, the order the single copies reduce in."""
import os
import re

import numpy as np
import pytest

from mp import run_ranks

STATS = re.compile(r"(\d+) of (\d+) large allreduces run as single copies, (\d+) allreduce votes")
MIN_BYTES = 8 << 20                # kDirectAllreduceMinBytes: smaller allreduces always take the ring
ELEMENTS = MIN_BYTES // 4 + 3      # float32s: just over the smallest eligible size, and uneven
DTYPES = ["float32", "float64", "float16", "int32", "int64", "int8", "uint8"]


def _data(dtype, count, rank):
    """Small integers every dtype holds exactly, different on every rank and at every position."""
    return ((np.arange(count) % 5) + rank + 1).astype(dtype)


def _random_sum_in_rank_order(hvd, single):
    """Random float32: single copies sum in rank order, bit for bit (the ring in another order)."""
    r, n = hvd.rank(), hvd.size()
    rng = [np.random.default_rng(q).standard_normal(ELEMENTS).astype(np.float32) for q in range(n)]
    ordered = rng[0].copy()
    for q in range(1, n):
        ordered += rng[q]
    out = hvd.allreduce(rng[r], op=hvd.Sum, name="random")
    assert np.array_equal(out, ordered) if single else np.allclose(out, ordered, rtol=1e-5, atol=1e-5)


def body_every_op(dtypes):
    os.environ["PYHOROVOD_ALLREDUCE_SINGLE_COPY"] = "single"
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    calls = 0
    for dtype in dtypes:
        count = MIN_BYTES // np.dtype(dtype).itemsize + 3
        # The data repeat every 5 elements, so the expected results are computed on 5 and repeated.
        xs = [_data(np.float64, 5, q) for q in range(n)]
        want = {hvd.Sum: sum(xs), hvd.Min: np.minimum.reduce(xs), hvd.Max: np.maximum.reduce(xs),
                hvd.Product: np.prod(xs, axis=0)}
        for op, five in want.items():
            if op == hvd.Product and np.dtype(dtype).itemsize == 1:
                five = five.astype(np.int64)                   # wraps around like the reduction
            full = np.resize(five.astype(dtype), count)
            x = _data(dtype, count, r)
            out = hvd.allreduce(x, op=op, name=f"{dtype}.{op}")
            assert np.array_equal(x, _data(dtype, count, r)), ("input changed", dtype, op)
            assert out.dtype == np.dtype(dtype) and np.array_equal(out, full), (dtype, op)
            hvd.allreduce_(x, op=op, name=f"{dtype}.{op}.inplace")
            assert np.array_equal(x, full), ("in place", dtype, op)
            calls += 2
        if dtype.startswith("float"):
            x = _data(dtype, count, r)
            out = hvd.allreduce(x, op=hvd.Average, name=f"{dtype}.avg")
            assert np.array_equal(out, np.resize((sum(xs) / n).astype(dtype), count)), ("average", dtype)
            calls += 1
    _random_sum_in_rank_order(hvd, True)
    # 17 tensors of 512 KiB reduced as one group: fused into one allreduce of 8.5 MiB.
    outs = hvd.grouped_allreduce([np.full(128 << 10, 10 * r + i, np.float32) for i in range(17)], op=hvd.Sum,
                                 name="fused")
    for i, out in enumerate(outs):
        assert np.array_equal(out, np.full(128 << 10, sum(10 * q + i for q in range(n)), np.float32)), i
    hvd.shutdown()
    return calls + 2


def body_vote(policy_by_rank, single):
    os.environ["PYHOROVOD_ALLREDUCE_SINGLE_COPY"] = policy_by_rank[int(os.environ["PYHOROVOD_RANK"])]
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    _random_sum_in_rank_order(hvd, single)
    x = np.full(ELEMENTS, r + 1, np.int32)
    hvd.allreduce_(x, op=hvd.Product, name="product")
    assert np.array_equal(x, np.full(ELEMENTS, np.prod(np.arange(1, n + 1)), np.int32))
    hvd.shutdown()
    return 2


def stats(stderr):
    m = STATS.search(stderr)
    assert m, f"no allreduce statistics in:\n{stderr}"
    return tuple(map(int, m.groups()))


def run(body, size, extra_env=None, args=()):
    env = {"HOROVOD_LOG_LEVEL": "info", **(extra_env or {})}
    results = run_ranks(body, size, timeout=150, env=env, args=args)
    return [(res.value, stats(res.stderr)) for res in results]


@pytest.mark.parametrize("size,dtypes", [(2, DTYPES), (3, ["float64", "float16", "int32", "int8"])])
def test_every_op_and_dtype_as_single_copies(size, dtypes):
    # 3 ranks: a block count that does not divide, and a rank past 1, which must keep its own piece aside to
    # reduce in rank order in place; one dtype of each element size.
    for calls, (ran_single, timed, votes) in run(body_every_op, size, args=(dtypes,)):
        assert ran_single == timed == calls and votes == 1, (ran_single, timed, calls, votes)


@pytest.mark.parametrize("size,single_ranks,single", [
    (2, [1], False), (4, [0, 3], False), (4, [1, 2, 3], True), (4, [0, 1, 2, 3], True),
])
def test_more_than_half_of_the_votes_choose_single_copies(size, single_ranks, single):
    policies = ["single" if q in single_ranks else "ring" for q in range(size)]
    for calls, (ran_single, timed, votes) in run(body_vote, size, args=(policies, single)):
        # A forced vote goes with the first round, before any call.
        assert timed == calls and ran_single == (calls if single else 0) and votes == 1, (ran_single, timed)


def body_auto(calls):
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    for call in range(calls):
        x = np.full(ELEMENTS, r + call, np.float32)
        hvd.allreduce_(x, op=hvd.Sum, name="auto")
        assert np.array_equal(x, np.full(ELEMENTS, n * call + n * (n - 1) // 2, np.float32)), call
    hvd.shutdown()


def test_measuring_ranks_explore_single_copies_and_stay_exact():
    # With `auto` everywhere every rank times the ring first; single copies, never timed, are explored once
    # a run of the ring has been judged (33 calls), so the mode turns single at least once.
    env = {"PYHOROVOD_ALLREDUCE_SINGLE_COPY": "auto"}
    for _, (ran_single, timed, votes) in run(body_auto, 2, extra_env=env, args=(48,)):
        assert timed == 48 and ran_single >= 1 and votes >= 1, (ran_single, timed, votes)


def test_nothing_is_timed_where_single_copies_are_off():
    env = {"PYHOROVOD_SHM_DIRECT_REFUSE": "1", "PYHOROVOD_ALLREDUCE_SINGLE_COPY": "single"}
    for _, (ran_single, timed, votes) in run(body_auto, 2, extra_env=env, args=(3,)):
        assert (ran_single, timed) == (0, 0), (ran_single, timed, votes)


def body_set_and_join():
    import pyhorovod as hvd
    odd = hvd.ProcessSet([1, 3])
    hvd.init(process_sets=[odd])
    r, n = hvd.rank(), hvd.size()
    if r in (1, 3):
        x = np.full(ELEMENTS, r, np.int32)
        out = hvd.allreduce(x, op=hvd.Sum, name="set", process_set=odd)
        assert np.array_equal(out, np.full(ELEMENTS, 4, np.int32))
    # Rank 0 joins at once; the others reduce, and rank 0 contributes the identity (0 for a sum).
    if r != 0:
        x = np.full(ELEMENTS, r, np.int64)
        out = hvd.allreduce(x, op=hvd.Sum, name="joined")
        assert np.array_equal(out, np.full(ELEMENTS, sum(range(1, n)), np.int64))
    hvd.join()
    hvd.shutdown()


def test_process_set_and_joined_rank_with_single_copies():
    env = {"PYHOROVOD_ALLREDUCE_SINGLE_COPY": "single"}
    results = run(body_set_and_join, 4, extra_env=env)
    for rank, (_, (ran_single, timed, _)) in enumerate(results):
        assert ran_single == timed == (2 if rank in (1, 3) else 1), (rank, ran_single, timed)


def body_torch_half_floats():
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    count = MIN_BYTES // 2 + 3
    for dtype in (torch.bfloat16, torch.float16):
        base = (torch.arange(count) % 7).to(dtype)
        x = base * (r + 1)
        hvd.allreduce_(x, op=hvd.Average, name=f"avg.{dtype}")
        # (1 + .. + n) / n times a value below 7: exact in both dtypes
        assert torch.equal(x, base * ((n + 1) / 2)), dtype
        out = hvd.allreduce(base + r, op=hvd.Max, name=f"max.{dtype}")
        assert torch.equal(out, base + (n - 1)), dtype
    hvd.shutdown()
    return 4


def test_torch_bfloat16_and_float16_as_single_copies():
    pytest.importorskip("torch")
    for calls, (ran_single, timed, _) in run(body_torch_half_floats, 2,
                                              extra_env={"PYHOROVOD_ALLREDUCE_SINGLE_COPY": "single"}):
        assert ran_single == timed == calls, (ran_single, timed, calls)


def body_killed_mid_copy():
    """Rank 1 is killed (SIGKILL) while single-copy allreduces of 64 MiB run; the others must raise
    HorovodInternalError naming themselves and the op, not hang and not crash."""
    import signal
    import threading
    os.environ["PYHOROVOD_ALLREDUCE_SINGLE_COPY"] = "single"
    import pyhorovod as hvd
    hvd.init()
    r = hvd.rank()
    x = np.ones((64 << 20) // 4, np.float32)
    hvd.allreduce_(x, op=hvd.Sum, name="warm")
    if r == 1:
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGKILL)).start()
    try:
        for i in range(1000):
            hvd.allreduce_(x, op=hvd.Sum, name="big")
    except hvd.HorovodInternalError as e:
        return {"type": type(e).__name__, "message": str(e)}
    return {"type": None, "message": "no error"}


def test_a_rank_killed_during_single_copies_fails_the_others_cleanly():
    results = run_ranks(body_killed_mid_copy, 3, timeout=120, check=False, collective_timeout=30, grace=90)
    assert results[1].returncode == -9, results[1]
    for r in (0, 2):
        res = results[r]
        assert res.returncode == 0 and res.value is not None, f"rank {r}:\n{res.stdout}\n{res.stderr}"
        assert res.value["type"] in ("HorovodInternalError", "HorovodTimeoutError"), res.value
        assert f"rank {r}" in res.value["message"] and "'big'" in res.value["message"], res.value
