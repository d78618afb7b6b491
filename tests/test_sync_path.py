"""The blocking calls' synchronous path (pyhorovod._api.submit_sync -> Engine.run_sync): every blocking
collective of the numpy API and of pyhorovod.torch, unnamed and named, at sizes from one element to
several ring segments, with exact values; interleaved with asynchronous unnamed calls (which keep their
numbered names) and with shape changes under the same reusable name. The timeline shows which path ran:
an unnamed blocking call is recorded under "<op>.noname.sync", an asynchronous one under "<op>.noname.<n>".
"""
import os
import tempfile

import numpy as np
import pytest

from mp import run_ranks

# elements per rank: one, a few, past the express round's head (256 B), past the inline-reduction limit
# (4 KiB), past one ring segment
COUNTS = (1, 3, 65, 1025, 300_001)
SYNC_OPS = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")


def _expect(op, n, r, count):
    """Exact expected output on rank r of n for the inputs _inputs() makes."""
    base = np.arange(count * n, dtype=np.float64) % 13 + 1
    if op == "allreduce":
        return base[:count] * (n * (n + 1) // 2)
    if op == "allgather":
        return np.concatenate([base[:count] * (q + 1) for q in range(n)])
    if op == "broadcast":
        return base[:count] * 1                              # root 0's values
    if op == "alltoall":                                     # block r of every rank q, in q order
        return np.concatenate([base[r * count:(r + 1) * count] * (q + 1) for q in range(n)])
    if op == "reducescatter":
        return base[r * count:(r + 1) * count] * (n * (n + 1) // 2)
    raise ValueError(op)


def _inputs(op, n, r, count, dtype):
    base = np.arange(count * n, dtype=np.float64) % 13 + 1
    if op in ("allreduce", "allgather", "broadcast"):
        return (base[:count] * (r + 1)).astype(dtype)
    return (base * (r + 1)).astype(dtype)                    # alltoall, reducescatter: n blocks


def _call(api, op, x, name, allreduce, broadcast):
    """One blocking call of `op` through `api` (pyhorovod or pyhorovod.torch); allreduce and broadcast
    name the forms to use (in place or not)."""
    if op == "allreduce":
        return getattr(api, allreduce)(x, op=api.Sum, name=name)
    if op == "broadcast":
        return getattr(api, broadcast)(x, root_rank=0, name=name)
    if op == "reducescatter":
        return api.reducescatter(x, op=api.Sum, name=name)
    return getattr(api, op)(x, name=name)


def every_blocking_call(timeline):
    import torch

    import pyhorovod as hvd
    import pyhorovod.torch as thvd
    thvd.init()
    n, r = hvd.size(), hvd.rank()
    if r == 0:
        hvd.start_timeline(timeline)
    checks = 0
    for dtype in (np.float32, np.int64):
        for count in COUNTS:
            for op in SYNC_OPS:
                want = _expect(op, n, r, count).astype(dtype)
                for name in (None, f"sync.{op}"):
                    # twice with the same shape (the second is a cached response), numpy then torch
                    for _ in range(2):
                        got = _call(hvd, op, _inputs(op, n, r, count, dtype), name, "allreduce", "broadcast_")
                        assert np.array_equal(got, want), (op, count, dtype, name, "numpy")
                        t = torch.from_numpy(_inputs(op, n, r, count, dtype))
                        got = _call(thvd, op, t, name and name + ".t", "allreduce_", "broadcast").numpy()
                        assert np.array_equal(got, want), (op, count, dtype, name, "torch")
                        checks += 2
                # an asynchronous unnamed call in between keeps its numbered name and still pairs up
                h = hvd.allgather_async(np.full(1, r, dtype))
                assert hvd.synchronize(h).tolist() == list(range(n))
    # uneven allgather under the reusable name: each rank its own first dimension
    got = hvd.allgather(np.full(r + 1, r, np.int32))
    assert got.tolist() == [q for q in range(n) for _ in range(q + 1)]
    # alltoall with splits, even then uneven (rank q sends j + 1 rows to rank j), under the reusable name
    # too; the received splits come back with the result
    out, received = hvd.alltoall(np.arange(n, dtype=np.int32) + 10 * r, splits=[1] * n)
    assert out.tolist() == [10 * q + r for q in range(n)] and received.tolist() == [1] * n
    x = np.concatenate([np.full(j + 1, 100 * r + j, np.int32) for j in range(n)])
    out, received = hvd.alltoall(x, splits=[j + 1 for j in range(n)])
    assert out.tolist() == [100 * q + r for q in range(n) for _ in range(r + 1)], out
    assert received.tolist() == [r + 1] * n
    if r == 0:
        hvd.stop_timeline()
    hvd.barrier()
    thvd.shutdown()
    return checks


@pytest.mark.parametrize("size", [2, 3])
def test_blocking_calls_take_the_sync_path_with_exact_values(size):
    timeline = os.path.join(tempfile.mkdtemp(prefix="pyhvd-sync-"), "timeline.json")
    results = run_ranks(every_blocking_call, size, args=(timeline,), timeout=400, collective_timeout=120)
    assert all(res.value == 2 * 2 * len(COUNTS) * len(SYNC_OPS) * 2 * 2 for res in results)
    with open(timeline) as f:
        text = f.read()
    for op in SYNC_OPS:
        assert f"{op}.noname.sync" in text, f"{op}: the unnamed blocking call did not take the synchronous path"
        assert f"sync.{op}" in text
    assert "allgather.noname.1" in text            # the asynchronous unnamed calls keep numbered names
    assert "alltoall.noname.1" not in text         # alltoall with splits took the synchronous path
