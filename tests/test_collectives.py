"""Collectives through the public API at world sizes 1-5.

The ranks are launched (tests/mp.py) once per world size; that launch runs every rank body below that the
size needs as a section (tests/launch_cache.py), each with its own init() and shutdown(), and each test
checks its section. Bodies run many checks and return how many they made, so the parent can tell a real
run from an empty one. Inputs and exact expectations: tests/coll_data.py. Failing collectives (a peer
that exits, a missing submission) are in test_collective_errors.py.
"""
import array
import time

import numpy as np
import pytest

from coll_data import AVERAGE, COUNTS, DTYPES, MAX, MIN, PRODUCT, SUM, check, expected, ops_for, rank_values
from launch_cache import launch_once, run_sections, section, shutdown_pyhorovod
from mp import WORLD_SIZES, run_ranks

MULTI_SEGMENT = (1 << 20) + 1   # elements: several segments per ring chunk with the default tuning
BIG_OPS = (SUM, AVERAGE, MAX)   # ops run at MULTI_SEGMENT (all of them at the small counts)


def _hvd_op(hvd, op):
    return {SUM: hvd.Sum, AVERAGE: hvd.Average, MIN: hvd.Min, MAX: hvd.Max, PRODUCT: hvd.Product}[op]


def _wait_poll(hvd, handle, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not hvd.poll(handle):
        if time.monotonic() > deadline:
            raise AssertionError("poll() never became true")
        time.sleep(0.0005)


def allreduce_matrix(big: bool):
    """Every dtype x op x in/out-of-place x count, async in one batch per dtype (the engine may fuse
    them), then a synchronous named pass, scaling factors, and the API's odd corners."""
    import pyhorovod as hvd
    hvd.init()
    size, rank, checks = hvd.size(), hvd.rank(), 0
    counts = COUNTS + ([MULTI_SEGMENT] if big else [])
    for dt in DTYPES:
        pending = []
        for op in ops_for(dt):
            for count in counts:
                if count == MULTI_SEGMENT and op not in BIG_OPS:
                    continue
                for inplace in (False, True):
                    x = dt.make(rank_values(rank, count, dt, op))
                    fn = hvd.allreduce_async_ if inplace else hvd.allreduce_async
                    pending.append((fn(x, op=_hvd_op(hvd, op), **dt.kwargs()), x, x.copy(), op, count, inplace))
        _wait_poll(hvd, pending[-1][0])
        for h, x, orig, op, count, inplace in pending:
            out = hvd.synchronize(h)
            what = f"allreduce{'_' if inplace else ''} {dt} {op} count={count}"
            if inplace:
                assert out is x, what
            else:
                assert out is not x and np.array_equal(x, orig), f"{what}: input modified"
            check(out, expected(size, count, dt, op), dt, what, exact=op != AVERAGE)
            checks += 1
        for op in ops_for(dt):  # one at a time, named
            for count in (0, 1, 17, 1023):
                x = dt.make(rank_values(rank, count, dt, op, seed=5))
                out = hvd.allreduce(x, name=f"sync.{dt}.{op}.{count}", op=_hvd_op(hvd, op), **dt.kwargs())
                check(out, expected(size, count, dt, op, seed=5), dt, f"sync {dt} {op} {count}",
                      exact=op != AVERAGE)
                checks += 1
        if dt.name != "bool":  # prescale 2, postscale 0.5 (3 for integers: whole factors only): exact
            x = dt.make(rank_values(rank, 65, dt, SUM))
            post = 0.5 if dt.is_float else 3.0
            out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=post, **dt.kwargs())
            check(out, expected(size, 65, dt, SUM, prescale=2.0, postscale=post), dt, f"scaled sum {dt}")
            out = hvd.allreduce_(x, op=hvd.Average, postscale_factor=3.0, **dt.kwargs())
            check(out, expected(size, 65, dt, AVERAGE, postscale=3.0), dt, f"scaled avg {dt}", exact=False)
            checks += 2
    # horovod.torch defaults: op=None means Average; average=True/False is the old spelling.
    x = np.full(5, 2.0 * (rank + 1), np.float32)
    assert np.allclose(hvd.allreduce(x), size + 1.0)
    assert np.allclose(hvd.allreduce(x, average=False), size * (size + 1.0))
    assert np.allclose(hvd.allreduce(x, average=True), size + 1.0)
    # A scalar, and buffer-protocol objects that are not numpy arrays.
    assert hvd.allreduce(np.array(rank, np.int64), op=hvd.Sum).item() == size * (size - 1) // 2
    buf = bytearray([rank, 1, 2])
    assert hvd.allreduce_(buf, op=hvd.Sum) is buf and list(buf) == [size * (size - 1) // 2, size, 2 * size]
    ints = array.array("i", [rank, -rank])
    out = hvd.allreduce(ints, op=hvd.Max)
    assert out.dtype == np.int32 and out.tolist() == [size - 1, 0] and ints.tolist() == [rank, -rank]
    mv = memoryview(bytearray(np.full(3, rank, np.float64).tobytes())).cast("d")
    hvd.allreduce_(mv, op=hvd.Min)
    assert mv.tolist() == [0.0, 0.0, 0.0]
    checks += 7
    if big:  # ~64 MiB of float32
        n = 16 << 20
        pattern = np.arange(7, dtype=np.float32)
        x = np.tile(np.roll(pattern, -rank), n // 7 + 1)[:n]
        want_pattern = sum(np.roll(pattern, -r) for r in range(size)).astype(np.float32)
        out = hvd.allreduce(x, op=hvd.Sum, name="big")
        assert np.array_equal(out, np.tile(want_pattern, n // 7 + 1)[:n]), "64 MiB allreduce wrong"
        checks += 1
    hvd.shutdown()
    return checks


def _block(r, rows, dt, seed, width=3):
    return dt.make(rank_values(r, rows * width, dt, SUM, seed=seed)).reshape(rows, width)


def other_collectives():
    import pyhorovod as hvd
    hvd.init()
    size, rank, checks = hvd.size(), hvd.rank(), 0
    for dt in DTYPES:
        kw = dt.kwargs()
        # allgather, uneven first dimension (rank 1 sends nothing)
        rows = [0 if r == 1 else r + 1 for r in range(size)]
        x = _block(rank, rows[rank], dt, seed=1)
        out = hvd.allgather(x, **kw)
        assert out.dtype == x.dtype
        want = np.concatenate([_block(r, rows[r], dt, seed=1) for r in range(size)])
        check(out, dt.values(want), dt, f"allgather {dt}")
        out = hvd.synchronize(hvd.allgather_async(x[:0], **kw))
        assert out.shape == (0, 3), out.shape
        checks += 2
        # broadcast from every root, out of place and in place
        for root in range(size):
            x = dt.make(rank_values(rank, 37, dt, SUM, seed=root))
            orig = x.copy()
            want = rank_values(root, 37, dt, SUM, seed=root)
            out = hvd.broadcast(x, root, **kw)
            check(out, want, dt, f"broadcast {dt} root={root}")
            assert np.array_equal(x, orig), "broadcast modified its input"
            assert hvd.broadcast_(x, root_rank=root, **kw) is x
            check(x, want, dt, f"broadcast_ {dt} root={root}")
            checks += 2
        # alltoall with uneven splits: rank r sends (r + j) % 3 rows to rank j
        splits = [(rank + j) % 3 for j in range(size)]
        x = np.concatenate([_block(rank, splits[j], dt, seed=100 * rank + j, width=2) for j in range(size)])
        out, received = hvd.alltoall(x, splits=splits, **kw)
        want = np.concatenate([_block(j, (j + rank) % 3, dt, seed=100 * j + rank, width=2) for j in range(size)])
        check(out, dt.values(want), dt, f"alltoall {dt}")
        assert received.tolist() == [(j + rank) % 3 for j in range(size)], received
        # alltoall, equal split (no splits: only the output comes back)
        x = _block(rank, 2 * size, dt, seed=7, width=1)
        out = hvd.alltoall(x, **kw)
        want = np.concatenate([_block(j, 2 * size, dt, seed=7, width=1)[2 * rank:2 * rank + 2] for j in range(size)])
        check(out, dt.values(want), dt, f"alltoall equal {dt}")
        checks += 2
        # reducescatter: the first d0 % size ranks get one extra row
        for d0 in (0, 1, size + 1, 2 * size + 3):
            counts = [d0 // size + (1 if r < d0 % size else 0) for r in range(size)]
            start = sum(counts[:rank])
            for op in ops_for(dt):
                x = dt.make(rank_values(rank, d0 * 2, dt, op)).reshape(d0, 2)
                out = hvd.reducescatter(x, op=_hvd_op(hvd, op), **kw)
                want = expected(size, d0 * 2, dt, op).reshape(d0, 2)[start:start + counts[rank]]
                check(out, want, dt, f"reducescatter {dt} {op} d0={d0}", exact=op != AVERAGE)
                checks += 1
    # grouped allreduce: one handle for several tensors of different types
    xs = [np.full(3, rank, np.float32), np.arange(4, dtype=np.int32) * rank, np.full(1, rank + 1, np.float64)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    tri = size * (size - 1) // 2
    assert [o.tolist() for o in outs] == [[float(tri)] * 3, [0, tri, 2 * tri, 3 * tri], [tri + size * 1.0]]
    h = hvd.grouped_allreduce_async_(xs, op=hvd.Max)
    _wait_poll(hvd, h)
    assert hvd.synchronize(h) == xs and xs[0].tolist() == [float(size - 1)] * 3
    assert hvd.grouped_allreduce([]) == []
    checks += 3
    # several handles in flight, synchronized in reverse order
    handles = [hvd.allreduce_async(np.full(8, rank + i, np.int64), op=hvd.Sum, name=f"multi.{i}")
               for i in range(6)]
    handles.append(hvd.broadcast_async(np.full(4, rank, np.int16), root_rank=size - 1))
    handles.append(hvd.allgather_async(np.full((1, 2), rank, np.int8)))
    assert hvd.synchronize(handles.pop()).tolist() == [[r, r] for r in range(size)]
    assert hvd.synchronize(handles.pop()).tolist() == [size - 1] * 4
    for i in reversed(range(6)):
        assert hvd.synchronize(handles[i]).tolist() == [tri + size * i] * 8
    with pytest.raises(ValueError):
        hvd.synchronize(handles[0])  # a handle is consumed by synchronize
    hvd.barrier()
    assert 0 <= hvd.join() < size
    checks += 11
    hvd.shutdown()
    return checks


def bad_arguments():
    """Rank 0 alone makes invalid calls: each must raise ValueError before anything is enqueued; if one
    reached the engine, the collectives below would mismatch or stall instead of passing."""
    import pyhorovod as hvd
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    a = np.arange(6, dtype=np.float32)
    ro = np.ones(3, np.float32)
    ro.flags.writeable = False
    cases = {
        "non-contiguous": lambda: hvd.allreduce(np.arange(10, dtype=np.float32)[::2]),
        "fortran order": lambda: hvd.allreduce(np.asfortranarray(np.ones((3, 4), np.float32))),
        "uint16 without dtype": lambda: hvd.allreduce(np.ones(3, np.uint16)),
        "complex": lambda: hvd.allreduce(np.ones(3, np.complex64)),
        "object": lambda: hvd.allreduce(np.array([1, "a"], dtype=object)),
        "list": lambda: hvd.allreduce([1.0, 2.0]),
        "big-endian": lambda: hvd.allreduce(np.ones(3, ">f4")),
        "dtype size mismatch": lambda: hvd.allreduce(a, dtype="bfloat16"),
        "dtype conflict": lambda: hvd.allreduce(np.ones(3, np.int16), dtype="float16"),
        "unknown dtype name": lambda: hvd.allreduce(np.ones(3, np.uint16), dtype="bf16"),
        "average on bool": lambda: hvd.allreduce(np.ones(3, bool), op=hvd.Average),
        "default op on bool": lambda: hvd.allreduce(np.ones(3, bool)),
        "prescale on bool": lambda: hvd.allreduce(np.ones(3, bool), op=hvd.Sum, prescale_factor=2.0),
        "adasum on int": lambda: hvd.allreduce(np.ones(3, np.int32), op=hvd.Adasum),
        "adasum reducescatter": lambda: hvd.reducescatter(a, op=hvd.Adasum),
        "unknown op": lambda: hvd.allreduce(a, op=42),
        "op and average": lambda: hvd.allreduce(a, op=hvd.Sum, average=True),
        "read-only in place": lambda: hvd.allreduce_(ro, op=hvd.Sum),
        "bytes in place": lambda: hvd.allreduce_(b"abcd", op=hvd.Sum),
        "grouped, one bad": lambda: hvd.grouped_allreduce([a, np.ones(3, np.uint16)], op=hvd.Sum),
        "broadcast root -1": lambda: hvd.broadcast(a, -1),
        "broadcast root = size": lambda: hvd.broadcast(a, size),
        "broadcast root 0.5": lambda: hvd.broadcast(a, 0.5),
        "allgather scalar": lambda: hvd.allgather(np.array(1.0, np.float32)),
        "alltoall splits sum": lambda: hvd.alltoall(np.ones(size + 1), splits=[1] * size),
        "alltoall splits length": lambda: hvd.alltoall(np.ones(2), splits=[2] + [0] * size),
        "alltoall negative split": lambda: hvd.alltoall(np.ones(2), splits=[3, -1] + [0] * (size - 2)
                                                        if size > 1 else [-1]),
        "alltoall split not int": lambda: hvd.alltoall(np.ones(2), splits=[2.5] + [0] * (size - 1)),
        "reducescatter scalar": lambda: hvd.reducescatter(np.array(1.0)),
        "reducescatter bool average": lambda: hvd.reducescatter(np.ones(4, bool)),
        "unregistered process set": lambda: hvd.allreduce(a, process_set=hvd.ProcessSet([0])),
        "unknown handle": lambda: hvd.synchronize(987654),
    }
    if size > 1:
        cases["alltoall uneven without splits"] = lambda: hvd.alltoall(np.ones(size + 1))
    if rank == 0:
        for name, call in cases.items():
            try:
                call()
            except ValueError:
                continue
            raise AssertionError(f"{name}: no ValueError")
    for i in range(3):  # nothing stray in flight: these match up on every rank
        assert hvd.allreduce(np.array([rank], np.int32), op=hvd.Sum).tolist() == [size * (size - 1) // 2]
        assert hvd.broadcast(np.array([rank, i]), root_rank=size - 1).tolist() == [size - 1, i]
    hvd.shutdown()
    return len(cases) if rank == 0 else 0


def lifecycle():
    import os
    import tempfile

    import pyhorovod as hvd
    assert not hvd.is_initialized()
    for query in (hvd.rank, hvd.size, hvd.local_rank, hvd.local_size, hvd.cross_rank, hvd.cross_size):
        with pytest.raises(ValueError, match="init"):
            query()
    with pytest.raises(ValueError, match="init"):
        hvd.allreduce(np.ones(2))
    hvd.shutdown()  # harmless before init
    hvd.init()
    hvd.init()      # harmless twice
    size, rank = hvd.size(), hvd.rank()
    assert hvd.allreduce(np.array([1.0]), op=hvd.Sum).tolist() == [float(size)]
    timeline = os.path.join(tempfile.gettempdir(), f"pyhvd-timeline-{os.getppid()}-{size}.json")
    hvd.start_timeline(timeline)
    hvd.allreduce(np.ones(3), op=hvd.Sum, name="timeline.op")
    hvd.stop_timeline()
    if rank == 0:
        with open(timeline) as f:
            assert "timeline.op" in f.read()
        os.unlink(timeline)
    h = hvd.allreduce_async(np.ones(2), op=hvd.Sum)
    hvd.synchronize(h)
    hvd.shutdown()
    assert not hvd.is_initialized()
    hvd.shutdown()  # harmless twice
    hvd.init()      # a fresh engine in the same process
    assert (hvd.size(), hvd.rank()) == (size, rank)
    assert hvd.allreduce(np.array([rank]), op=hvd.Sum).tolist() == [size * (size - 1) // 2]
    info = hvd.build_info()
    assert {"version", "nccl", "cuda", "shm"} <= set(info) and hvd.nccl_built() == info["nccl_version"]
    assert not hvd.mpi_built() and not hvd.gloo_built() and hvd.tcp_built()
    hvd.shutdown()
    return "ok"


def process_sets_static():
    import pyhorovod as hvd
    size = int(__import__("os").environ["PYHOROVOD_SIZE"])
    evens = hvd.ProcessSet(range(0, size, 2))
    odds = hvd.ProcessSet(range(1, size, 2))
    hvd.init(process_sets=[evens, odds])
    rank = hvd.rank()
    mine, other = (evens, odds) if rank % 2 == 0 else (odds, evens)
    assert (mine.process_set_id, other.process_set_id) == ((1, 2) if rank % 2 == 0 else (2, 1))
    assert mine.included() and not other.included() and mine.rank() == rank // 2 and other.rank() == -1
    total = hvd.allreduce(np.array([rank], np.int64), op=hvd.Sum, process_set=mine)
    assert total.tolist() == [sum(mine.ranks)]
    assert hvd.broadcast(np.array([rank]), root_rank=mine.ranks[-1], process_set=mine).tolist() == [mine.ranks[-1]]
    assert hvd.allgather(np.array([rank]), process_set=mine).tolist() == mine.ranks
    assert hvd.allreduce(np.array([1]), op=hvd.Sum).tolist() == [size]  # the global set still works
    with pytest.raises(ValueError):
        hvd.allreduce(np.array([1]), process_set=other)
    hvd.barrier(process_set=mine)
    set_id = mine.process_set_id
    hvd.shutdown()
    assert mine.process_set_id is None  # shutdown unregisters every set
    return set_id


def process_sets_dynamic():
    import pyhorovod as hvd
    hvd.init(process_sets="dynamic")
    size, rank = hvd.size(), hvd.rank()
    members = [0, size - 1] if size > 2 else [1]  # the global set's ranks cannot be added again
    ps = hvd.add_process_set(members)
    assert ps.process_set_id not in (None, 0) and ps.included() == (rank in members)
    if ps.included():
        out = hvd.allreduce(np.array([rank + 1]), op=hvd.Sum, process_set=ps)
        assert out.tolist() == [sum(members) + len(members)], out
    assert hvd.remove_process_set(ps) and ps.process_set_id is None
    assert hvd.allreduce(np.array([1]), op=hvd.Sum).tolist() == [size]
    hvd.shutdown()
    return "ok"


# ------------------------------------------------------------------ one launch per world size

SECTIONS = [  # (name, body, args, world sizes); run in this order, lifecycle first (it starts uninitialized)
    ("lifecycle", lifecycle, (), [1, 3]),
    ("matrix", allreduce_matrix, (True,), WORLD_SIZES),
    # 256-byte segments make every count above a few dozen elements multi-segment; threshold 1 forces the
    # ring for everything; fusion off runs each request on its own.
    ("matrix_ring_tiny_segments_no_fusion", allreduce_matrix, (False,), WORLD_SIZES),
    ("others", other_collectives, (), WORLD_SIZES),
    ("bad_arguments", bad_arguments, (), [1, 3]),
    ("process_sets_static", process_sets_static, (), [2, 3, 5]),
    ("process_sets_dynamic", process_sets_dynamic, (), [2, 3, 5]),
]
TINY_RING_ENV = {"PYHOROVOD_SEGMENT_BYTES": "256", "PYHOROVOD_SMALL_THRESHOLD_BYTES": "1",
                 "HOROVOD_FUSION_THRESHOLD": "0"}


def _run_section(name, fn, args):
    """One section: its own init()..shutdown() (the tiny-ring one with its knobs in the environment
    that init() reads)."""
    import os

    env = TINY_RING_ENV if name == "matrix_ring_tiny_segments_no_fusion" else {}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return fn(*args)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def suite(size):
    return run_sections([(name, lambda n=name, f=fn, a=args: _run_section(n, f, a))
                         for name, fn, args, sizes in SECTIONS if size in sizes], after_failure=shutdown_pyhorovod)


def launched(size):
    return launch_once(("collectives", size),
                       lambda: run_ranks(suite, size, args=(size,), timeout=600, collective_timeout=144))


@pytest.mark.parametrize("size", WORLD_SIZES)
def test_allreduce_matrix(size):
    values = section(launched(size), "matrix")
    assert all(v > 1000 for v in values), values


@pytest.mark.parametrize("size", WORLD_SIZES)
def test_allreduce_matrix_ring_tiny_segments_no_fusion(size):
    values = section(launched(size), "matrix_ring_tiny_segments_no_fusion")
    assert all(v > 1000 for v in values), values


@pytest.mark.parametrize("size", WORLD_SIZES)
def test_other_collectives(size):
    values = section(launched(size), "others")
    assert all(v > 100 for v in values), values


@pytest.mark.parametrize("size", [1, 3])
def test_bad_arguments_raise_value_error_before_communication(size):
    assert section(launched(size), "bad_arguments")[0] >= 30


@pytest.mark.parametrize("size", [1, 3])
def test_init_shutdown_lifecycle(size):
    assert section(launched(size), "lifecycle") == ["ok"] * size


@pytest.mark.parametrize("size", [2, 3, 5])
def test_process_sets(size):
    assert section(launched(size), "process_sets_static") == [1 + r % 2 for r in range(size)]
    assert section(launched(size), "process_sets_dynamic") == ["ok"] * size
