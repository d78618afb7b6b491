"""Large allgather, broadcast, alltoall, reducescatter and allreduce with exact expected values.

Sizes straddle 256 KiB (one element below, at and above it: where a large-message path would take
over, and where off-by-one errors in segmenting show) plus 4 MiB, for float32, float64 and int32, at 2,
3 and 4 ranks, over shared memory and over TCP (PYHOROVOD_SHM=0). Inputs are small integers (exact in
every dtype); each rank rebuilds every other rank's input locally and checks its own result element by
element. One 32 MiB float32 case per op runs at 2 ranks over shared memory only, to keep the file's run
time bounded on a loaded machine.
"""
import numpy as np
import pytest

from mp import run_ranks

DTYPES = ("float32", "float64", "int32")
THRESHOLD_BYTES = 256 << 10


def _counts(dtype):
    item = np.dtype(dtype).itemsize
    n = THRESHOLD_BYTES // item
    return [n - 1, n, n + 1, (4 << 20) // item]


def _values(rank, count, dtype, seed):
    # periodic small integers, different per rank and seed: exact sums at these world sizes
    idx = np.arange(count, dtype=np.int64)
    return ((idx * (2 * rank + 3) + 7 * seed + rank) % 61 - 30).astype(dtype)


def body(counts_by_dtype, big):
    import pyhorovod as hvd
    hvd.init()
    size, rank, checks = hvd.size(), hvd.rank(), 0
    cases = [(dt, c) for dt, cs in counts_by_dtype.items() for c in cs]
    for dt, count in cases:
        seed = count % 97
        # allgather, uneven first dimension: rank r contributes count + r elements (rank 1: count - 1)
        rows = [count - 1 if r == 1 else count + r for r in range(size)]
        out = hvd.allgather(_values(rank, rows[rank], dt, seed), name=f"ag.{dt}.{count}")
        want = np.concatenate([_values(r, rows[r], dt, seed) for r in range(size)])
        assert out.dtype == want.dtype and np.array_equal(out, want), f"allgather {dt} {count}"
        checks += 1
        # broadcast from every root
        for root in range(size):
            x = _values(rank, count, dt, seed + root)
            out = hvd.broadcast(x, root, name=f"bc.{dt}.{count}.{root}")
            assert np.array_equal(out, _values(root, count, dt, seed + root)), f"broadcast {dt} {count} {root}"
            assert np.array_equal(x, _values(rank, count, dt, seed + root)), f"broadcast {dt} {count}: input changed"
            checks += 1
        # and in place, from the last rank
        x = _values(rank, count, dt, seed + 5)
        assert hvd.broadcast_(x, size - 1, name=f"bc_.{dt}.{count}") is x
        assert np.array_equal(x, _values(size - 1, count, dt, seed + 5)), f"broadcast_ {dt} {count}"
        checks += 1
        # alltoall, uneven splits: rank r sends count // size + (r + j) % 3 elements to rank j
        base = max(count // size, 1)
        splits = [base + (rank + j) % 3 for j in range(size)]
        x = np.concatenate([_values(rank, splits[j], dt, seed + 13 * j) for j in range(size)])
        out, received = hvd.alltoall(x, splits=splits, name=f"a2a.{dt}.{count}")
        want = np.concatenate([_values(j, base + (j + rank) % 3, dt, seed + 13 * rank) for j in range(size)])
        assert np.array_equal(out, want), f"alltoall {dt} {count}"
        assert received.tolist() == [base + (j + rank) % 3 for j in range(size)]
        checks += 1
        # reducescatter (Sum): the first count % size ranks get one extra element
        parts = [count // size + (1 if r < count % size else 0) for r in range(size)]
        start = sum(parts[:rank])
        total = sum(_values(r, count, dt, seed).astype(np.int64) for r in range(size)).astype(dt)
        out = hvd.reducescatter(_values(rank, count, dt, seed), op=hvd.Sum, name=f"rs.{dt}.{count}")
        assert np.array_equal(out, total[start:start + parts[rank]]), f"reducescatter {dt} {count}"
        # allreduce (Sum), out of place: the input is left as it was
        x = _values(rank, count, dt, seed)
        out = hvd.allreduce(x, op=hvd.Sum, name=f"ar.{dt}.{count}")
        assert np.array_equal(out, total), f"allreduce {dt} {count}"
        assert np.array_equal(x, _values(rank, count, dt, seed)), f"allreduce {dt} {count}: input changed"
        checks += 2
    if big:
        count = (32 << 20) // 4
        x = _values(rank, count, "float32", 5)
        out = hvd.allgather(x, name="ag.big")
        assert np.array_equal(out, np.concatenate([_values(r, count, "float32", 5) for r in range(size)]))
        out = hvd.broadcast(x, size - 1, name="bc.big")
        assert np.array_equal(out, _values(size - 1, count, "float32", 5))
        assert np.array_equal(x, _values(rank, count, "float32", 5)), "broadcast: the input changed"
        total = sum(_values(r, count, "float32", 5) for r in range(size))
        out = hvd.reducescatter(x, op=hvd.Sum, name="rs.big")
        assert np.array_equal(out, total[rank * (count // size):(rank + 1) * (count // size)])
        out = hvd.allreduce(x, op=hvd.Sum, name="ar.big")
        assert np.array_equal(out, total)
        assert np.array_equal(x, _values(rank, count, "float32", 5)), "allreduce: the input changed"
        out = hvd.alltoall(x, name="a2a.big")
        step = count // size
        assert np.array_equal(out, np.concatenate([_values(j, count, "float32", 5)[rank * step:(rank + 1) * step]
                                                   for j in range(size)]))
        checks += 5
    hvd.shutdown()
    return checks


@pytest.mark.parametrize("shm", ["1", "0"])
@pytest.mark.parametrize("size", [2, 3, 4])
def test_large_collectives(size, shm):
    # every dtype at 2 ranks over shared memory; one dtype per (size, transport) otherwise, rotating
    if size == 2 and shm == "1":
        dtypes = DTYPES
    else:
        dtypes = (DTYPES[(size + int(shm)) % len(DTYPES)],)
    counts = {dt: _counts(dt) for dt in dtypes}
    big = size == 2 and shm == "1"
    results = run_ranks(body, size, args=(counts, big), timeout=180, env={"PYHOROVOD_SHM": shm})
    per_case = 5 + size  # allgather, one broadcast per root and one in place, alltoall, reducescatter, allreduce
    want = sum(len(c) for c in counts.values()) * per_case + (5 if big else 0)
    assert [r.value for r in results] == [want] * size
