"""A bounded soak. 4 ranks run thousands of mixed collectives -- random op, size
(0, 1, primes, up to 2^17 elements), dtype, name (a pool, so the response cache both hits and misses),
reduction, root and alltoall splits -- in async batches, checking every result exactly. After a warm-up
(the first quarter of the run) the resident memory (RSS) must not keep growing, and the number of open
file descriptors, threads and pyhorovod handles must not change; after shutdown, descriptors and threads
are back to what they were before init.

Duration: PYHOROVOD_SOAK_SECONDS (default 60, at most 180); CI can run a shorter soak with e.g.
PYHOROVOD_SOAK_SECONDS=15. Every choice comes from a random generator seeded by the batch number, so all
ranks agree on the ops without talking; the data depend on the rank, so the expected result of every op
is computed locally from what each rank would have sent. Rank 0's clock decides when to stop (broadcast).
"""
import os
import time

import numpy as np

from fault_util import fd_count, rss_kb, thread_count
from mp import run_ranks

SECONDS = min(180.0, float(os.environ.get("PYHOROVOD_SOAK_SECONDS", "60")))
SIZES = [0, 1, 2, 3, 7, 31, 127, 257, 1021, 4093, 16381, 65537, 131072]
DTYPES = [np.int8, np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]
OPS = ["allreduce", "allreduce_", "grouped", "allgather", "broadcast", "alltoall", "reducescatter"]


def data(rng_seed, rank, count, dtype):
    """Rank `rank`'s input: small integers (every sum of 4 ranks is exact, even in int8 and float16)."""
    rng = np.random.default_rng(rng_seed * 1000 + rank)
    low = 0 if np.issubdtype(dtype, np.unsignedinteger) else -7
    return rng.integers(low, 8, count).astype(dtype)


def plan(batch, n):
    """The ops of one batch, identical on every rank: (kind, name, count, dtype, extra)."""
    rng = np.random.default_rng(batch)
    ops = []
    for j in range(int(rng.integers(1, 9))):
        kind = OPS[int(rng.integers(len(OPS)))]
        count = SIZES[int(rng.integers(len(SIZES)))] if rng.random() < 0.9 else int(rng.integers(0, 5000))
        dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        name = f"{kind}.{int(rng.integers(12))}.{j}"   # reused names: response cache hits and misses
        extra = {"op": ["Sum", "Min", "Max"][int(rng.integers(3))], "root": int(rng.integers(n)),
                 "splits": [rng.multinomial(count, [1 / n] * n).tolist() for _ in range(n)],
                 "seed": batch * 100 + j}
        ops.append((kind, name, count, dtype, extra))
    return ops


def expected(kind, count, dtype, extra, me, n):
    xs = [data(extra["seed"], q, count, dtype) for q in range(n)]
    if kind in ("allreduce", "allreduce_", "reducescatter", "grouped"):
        stack = np.stack(xs).astype(np.float64)
        red = {"Sum": stack.sum(0), "Min": stack.min(0), "Max": stack.max(0)}[extra["op"]].astype(dtype)
        if kind == "reducescatter":
            rows = [count // n + (1 if q < count % n else 0) for q in range(n)]
            start = sum(rows[:me])
            return red[start:start + rows[me]]
        return red
    if kind == "allgather":
        return np.concatenate([x[:count - q] if count > q else x[:0] for q, x in enumerate(xs)])
    if kind == "broadcast":
        return xs[extra["root"]]
    # alltoall: rank q sends rows splits[q][me] (its me-th block) to me
    parts = []
    for q, x in enumerate(xs):
        s = extra["splits"][q]
        parts.append(x[sum(s[:me]):sum(s[:me + 1])])
    return np.concatenate(parts)


def submit(hvd, kind, name, count, dtype, extra, me):
    x = data(extra["seed"], me, count, dtype)
    op = getattr(hvd, extra["op"])
    if kind == "allreduce":
        return x, hvd.allreduce_async(x, op=op, name=name)
    if kind == "allreduce_":
        return x, hvd.allreduce_async_(x, op=op, name=name)
    if kind == "grouped":
        return x, hvd.grouped_allreduce_async([x, x.copy()], op=op, name=name)
    if kind == "allgather":
        return x, hvd.allgather_async(x[:max(0, count - me)], name=name)
    if kind == "broadcast":
        return x, hvd.broadcast_async(x, root_rank=extra["root"], name=name)
    if kind == "alltoall":
        return x, hvd.alltoall_async(x, splits=extra["splits"][me], name=name)
    return x, hvd.reducescatter_async(x, op=op, name=name)


def body_soak(seconds):
    import pyhorovod as hvd
    from pyhorovod import _api
    before = {"fds": fd_count(), "threads": thread_count()}
    hvd.init()
    me, n = hvd.rank(), hvd.size()
    samples, batch, ops_run, go = [], 0, 0, True
    start = time.monotonic()
    warm = None
    while go:
        pending = []
        for kind, name, count, dtype, extra in plan(batch, n):
            x, h = submit(hvd, kind, name, count, dtype, extra, me)
            pending.append((kind, count, dtype, extra, h))
        for kind, count, dtype, extra, h in pending:
            out = hvd.synchronize(h)
            if kind == "grouped":
                assert len(out) == 2 and np.array_equal(out[0], out[1]), (batch, kind)
                out = out[0]
            elif kind == "alltoall":
                out, received = out
                assert list(received) == [extra["splits"][q][me] for q in range(n)], (batch, received)
            want = expected(kind, count, dtype, extra, me, n)
            assert out.dtype == want.dtype and np.array_equal(out, want), (batch, kind, count, dtype)
            ops_run += 1
        assert not _api._handles and not _api._orphans, "handle table not empty after synchronize"
        batch += 1
        elapsed = time.monotonic() - start
        if warm is None and elapsed > seconds / 4:
            warm = {"rss": rss_kb(), "fds": fd_count(), "threads": thread_count(), "batch": batch}
        if batch % 25 == 0:
            samples.append((round(elapsed, 1), rss_kb()))
        go = bool(hvd.broadcast(np.array([elapsed < seconds], np.uint8), root_rank=0, name="soak.go")[0])
    end = {"rss": rss_kb(), "fds": fd_count(), "threads": thread_count(), "batch": batch}
    hvd.shutdown()
    return {"warm": warm, "end": end, "ops": ops_run, "samples": samples, "before": before,
            "after_shutdown": {"fds": fd_count(), "threads": thread_count()}}


def test_soak_mixed_collectives_exact_with_no_growth():
    results = run_ranks(body_soak, 4, timeout=SECONDS + 120, args=(SECONDS,),
                        env={"PYHOROVOD_TIMEOUT_SECONDS": "60"})
    for res in results:
        v = res.value
        warm, end = v["warm"], v["end"]
        assert warm is not None, v
        # Growth = the lowest RSS of the last quarter minus the lowest of the second (just after warm-up).
        # One sample at each end swings by tens of MiB with what happens to be alive at that moment (a
        # batch's outputs of up to 4 MiB each, the engine's output pool of up to 4 released buffers); a
        # leak raises the floor, which the minimum over many samples shows without that noise.
        early = [kb for t, kb in v["samples"] if SECONDS / 4 < t <= SECONDS / 2] or [warm["rss"]]
        late = [kb for t, kb in v["samples"] if t > 3 * SECONDS / 4] or [end["rss"]]
        growth = min(late) - min(early)
        print(f"MEASURED soak {SECONDS:g} s, rank {res.rank}: {v['ops']} exact collectives in {end['batch']} "
              f"batches; lowest RSS {min(early)} -> {min(late)} KiB after warm-up ({growth:+d} KiB; single "
              f"samples {warm['rss']} -> {end['rss']}); fds {warm['fds']} -> {end['fds']}; threads "
              f"{warm['threads']} -> {end['threads']}")
        assert v["ops"] >= 200, v
        assert end["fds"] == warm["fds"], v
        assert end["threads"] <= warm["threads"], v   # a leak grows; a transient set-up thread may end
        assert v["after_shutdown"] == v["before"], v   # shutdown closed every socket and joined its threads
        # A leak of even 1 KiB per op over the ~15,000 ops between the windows (60 s), or a buffer per op,
        # would exceed this.
        assert growth < 16 * 1024, v
