"""The raw core (_core.Communicator: TcpBackend + algorithms, no engine) over real processes.

The ranks are spawned with tests/mp.py (hard timeout, every rank's output and traceback on failure) once
per world size and transport: that launch runs every rank body below as a section (tests/launch_cache.py),
each on a Communicator of its own built from the harness's PYHOROVOD_* variables, and each rank checks its
own results exactly against a locally computed expectation (tests/coll_data.py)."""
import os
import time

import numpy as np
import pytest

import coll_data as cd
from launch_cache import launch_once, run_sections, section
from mp import WORLD_SIZES, connect_options_from_env, run_ranks

TIMEOUT = 60.0  # per collective, inside the ranks; the harness kills the whole run later than that

CODES = {"uint8": "UINT8", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
         "float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64", "bool": "BOOL"}
OP_CODES = {cd.SUM: "SUM", cd.AVERAGE: "AVERAGE", cd.MIN: "MIN", cd.MAX: "MAX", cd.PRODUCT: "PRODUCT"}


def _communicator(prefix, **tuning):
    """A Communicator of its own (store keys under `prefix`), so that one launch can build several."""
    from pyhorovod import _core
    o = connect_options_from_env(f"test_communicator/{prefix}")
    o.shm_enable = os.environ.get("PHV_TEST_TRANSPORT", "shm") == "shm"
    for k, v in tuning.items():
        setattr(o.tuning, k, v)
    return _core, _core.Communicator(o)


# ----------------------------------------------------------------------------------------- rank bodies

def body_allreduce():
    core, comm = _communicator("allreduce", segment_bytes=4096)  # small segments: multi-segment rings at small counts
    r, n = comm.rank, comm.size
    checked = 0
    for dt in cd.DTYPES:
        code = getattr(core, CODES[dt.name])
        for op in cd.ops_for(dt):
            for algorithm in ("auto", "ring", "small"):
                counts = cd.COUNTS if algorithm == "auto" else [0, 1, 7, 1025, 4097]
                for count in counts:
                    buf = dt.make(cd.rank_values(r, count, dt, op))
                    comm.allreduce(buf, code, getattr(core, OP_CODES[op]), TIMEOUT, algorithm)
                    cd.check(buf, cd.expected(n, count, dt, op), dt,
                             f"rank {r}: allreduce {dt.name} {op} {algorithm} count {count}", exact=op != cd.AVERAGE)
                    checked += 1
    comm.close()
    return checked


def body_allreduce_large():
    core, comm = _communicator("large")
    r, n = comm.rank, comm.size
    count = 16 << 20  # 64 MiB of float32, the default (model-chosen) segment size
    buf = (np.arange(count, dtype=np.int64) % 1000 + r).astype(np.float32)
    comm.allreduce(buf, core.FLOAT32, core.SUM, TIMEOUT, "ring")
    want = (np.arange(count, dtype=np.int64) % 1000 * n + n * (n - 1) // 2).astype(np.float32)
    assert np.array_equal(buf, want), f"rank {r}: 64 MiB allreduce wrong at {np.flatnonzero(buf != want)[:5]}"
    comm.close()


def body_others():
    core, comm = _communicator("others", segment_bytes=1024)
    r, n = comm.rank, comm.size
    # allgatherv: rank q contributes (q * 3 % 4) * 5 int64 values q*1000 + i (some ranks contribute 0).
    for scale in (1, 3000):
        rows = [(q * 3 % 4) * 5 * scale for q in range(n)]
        send = np.arange(rows[r], dtype=np.int64) + r * 1000
        recv = np.full(sum(rows), -1, dtype=np.int64)
        comm.allgatherv(send, recv, [k * 8 for k in rows], TIMEOUT)
        want = np.concatenate([np.arange(rows[q], dtype=np.int64) + q * 1000 for q in range(n)])
        assert np.array_equal(recv, want), f"rank {r}: allgatherv (scale {scale}) wrong"
        send_inside = recv[sum(rows[:r]):sum(rows[:r + 1])]  # send may alias its place in recv
        comm.allgatherv(send_inside, recv, [k * 8 for k in rows], TIMEOUT)
        assert np.array_equal(recv, want), f"rank {r}: allgatherv in place wrong"
    # broadcast from every root, sizes 0, 1, 1025 and multi-segment.
    for root in range(n):
        for count in (0, 1, 1025, 50000):
            buf = np.arange(count, dtype=np.float64) + root * 7 if r == root else np.zeros(count)
            comm.broadcast(buf, root, TIMEOUT)
            assert np.array_equal(buf, np.arange(count, dtype=np.float64) + root * 7), \
                f"rank {r}: broadcast from {root} count {count} wrong"
    # alltoallv: q sends ((q + 2p) % 3) * k int32 values q*100000 + p*1000 + i to p.
    for k in (1, 2000):
        def nsend(q, p):
            return ((q + 2 * p) % 3) * k
        send = np.concatenate([np.arange(nsend(r, p), dtype=np.int32) + r * 100000 + p * 1000 for p in range(n)])
        recv = np.full(sum(nsend(q, r) for q in range(n)), -1, dtype=np.int32)
        comm.alltoallv(send, [nsend(r, p) * 4 for p in range(n)], recv, [nsend(q, r) * 4 for q in range(n)], TIMEOUT)
        want = np.concatenate([np.arange(nsend(q, r), dtype=np.int32) + q * 100000 + r * 1000 for q in range(n)])
        assert np.array_equal(recv, want), f"rank {r}: alltoallv (k {k}) wrong"
    # reducescatter as in Horovod: the first dim0 % size ranks get one extra element.
    for total in (0, 1, n + 2, 10007):
        counts = [total // n + (1 if q < total % n else 0) for q in range(n)]
        inp = (np.arange(total, dtype=np.int64) % 97 + r).astype(np.float32)
        out = np.full(counts[r], -1, dtype=np.float32)
        comm.reducescatter(inp, out, counts, core.FLOAT32, core.SUM, TIMEOUT)
        full = (np.arange(total, dtype=np.int64) % 97 * n + n * (n - 1) // 2).astype(np.float32)
        start = sum(counts[:r])
        assert np.array_equal(out, full[start:start + counts[r]]), f"rank {r}: reducescatter total {total} wrong"
        out_max = np.full(counts[r], -1, dtype=np.int32)
        comm.reducescatter(inp.astype(np.int32), out_max, counts, core.INT32, core.MAX, TIMEOUT)
        full_max = (np.arange(total, dtype=np.int64) % 97 + n - 1).astype(np.int32)
        assert np.array_equal(out_max, full_max[start:start + counts[r]]), f"rank {r}: reducescatter max wrong"
    # barrier: rank 0 arrives 0.3 s late; nobody may leave before it arrives.
    comm.barrier(TIMEOUT)
    if r == 0:
        time.sleep(0.3)
    t0 = time.monotonic()
    comm.barrier(TIMEOUT)
    waited = time.monotonic() - t0
    assert r == 0 or n == 1 or waited > 0.2, f"rank {r}: left the barrier after {waited:.3f} s"
    comm.close()


def body_bad_arguments():
    core, comm = _communicator("bad")
    n = comm.size
    buf = np.arange(8, dtype=np.float32)
    ro = np.arange(8, dtype=np.float32)
    ro.flags.writeable = False
    bad_calls = [
        lambda: comm.allreduce(np.arange(16, dtype=np.float32)[::2], core.FLOAT32, core.SUM, TIMEOUT),
        lambda: comm.allreduce(ro, core.FLOAT32, core.SUM, TIMEOUT),
        lambda: comm.allreduce(buf, 99, core.SUM, TIMEOUT),
        lambda: comm.allreduce(buf, core.FLOAT32, 17, TIMEOUT),
        lambda: comm.allreduce(buf, core.FLOAT64, core.SUM, TIMEOUT) if buf.nbytes % 8 else
        comm.allreduce(np.arange(3, dtype=np.int8), core.INT32, core.SUM, TIMEOUT),
        lambda: comm.allreduce(buf, core.FLOAT32, core.SUM, TIMEOUT, "fastest"),
        lambda: comm.allreduce(buf, core.FLOAT32, core.SUM, 0.0),
        lambda: comm.allreduce("not a buffer", core.FLOAT32, core.SUM, TIMEOUT),
        lambda: comm.broadcast(buf, n, TIMEOUT),
        lambda: comm.broadcast(buf, -1, TIMEOUT),
        lambda: comm.allgatherv(buf, np.zeros(8 * n, np.float32), [32] * (n + 1), TIMEOUT),
        lambda: comm.allgatherv(buf, np.zeros(8 * n - 1, np.float32), [32] * n, TIMEOUT),
        lambda: comm.allgatherv(buf, ro, [32] * n, TIMEOUT),
        lambda: comm.alltoallv(buf, [4] * n, np.zeros(8, np.float32), [4] * n, TIMEOUT) if n != 8 else None,
        lambda: comm.reducescatter(buf, np.zeros(9, np.float32), [8] + [0] * (n - 1), core.FLOAT32, core.SUM, TIMEOUT),
        lambda: comm.reducescatter(buf, buf, [1] * n, core.FLOAT32, core.SUM, TIMEOUT),
    ]
    for i, call in enumerate(bad_calls):
        with pytest.raises(core.InvalidArgumentError) as info:
            call()
        assert info.value.kind == "INVALID_ARGUMENT", info.value.kind
        assert isinstance(info.value, core.CoreError) and isinstance(info.value, RuntimeError)
        assert np.array_equal(buf, np.arange(8, dtype=np.float32)), f"call {i} changed its buffer"
    # Nothing was communicated: a real collective still lines up on every rank.
    comm.allreduce(buf, core.FLOAT32, core.SUM, TIMEOUT)
    assert np.array_equal(buf, np.arange(8, dtype=np.float32) * n)
    comm.close()
    with pytest.raises(core.ShutdownError):
        comm.barrier(TIMEOUT)


def body_timeout_then_peer_lost():
    """Rank 1 skips a broadcast from itself: rank 0 times out naming rank 1; rank 0's failure closes its
    connections, so rank 1's next collective fails fast with PeerLostError naming rank 0. (Rank 0 only
    receives in that broadcast, so no stale bytes of it wait in rank 1's socket.)"""
    core, comm = _communicator("timeout")
    r = comm.rank
    comm.barrier(TIMEOUT)
    if r == 0:
        t0 = time.monotonic()
        with pytest.raises(core.TimeoutError_) as info:
            comm.broadcast(np.ones(1000, np.float32), 1, 0.5)
        took = time.monotonic() - t0
        assert 0.45 < took < 3, took
        assert "rank 0" in str(info.value) and "rank 1 (" in str(info.value), str(info.value)
        assert info.value.kind == "TIMEOUT"
        with pytest.raises(core.TimeoutError_):  # the transport keeps reporting its first failure
            comm.barrier(TIMEOUT)
    else:
        time.sleep(1.0)
        t0 = time.monotonic()
        with pytest.raises(core.PeerLostError) as info:
            comm.barrier(TIMEOUT)
        assert time.monotonic() - t0 < 5
        assert "rank 0 (" in str(info.value), str(info.value)
    comm.close()


# ----------------------------------------------------------------------------------------------- tests

TRANSPORTS = ["shm", "tcp"]  # shared-memory rings between local ranks (the default), or TCP only
LARGE_SIZES = [1, 2, 3, 5]
BAD_ARGUMENT_SIZES = [1, 2, 3]
BODIES = {"allreduce": body_allreduce, "others": body_others, "allreduce_large": body_allreduce_large,
          "bad_arguments": body_bad_arguments, "timeout_then_peer_lost": body_timeout_then_peer_lost}


def sections_for(size, transport):
    names = ["allreduce", "others"]
    if size in LARGE_SIZES:
        names.append("allreduce_large")
    if size in BAD_ARGUMENT_SIZES and transport == "shm":
        names.append("bad_arguments")
    if size == 2:
        names.append("timeout_then_peer_lost")  # last: it leaves its communicator failed on purpose
    return names


def body_suite(names):
    return run_sections([(name, BODIES[name]) for name in names])


def launched(size, transport):
    """The one launch for this world size and transport (every section it needs), shared by the tests."""
    return launch_once(("communicator", size, transport), lambda: run_ranks(
        body_suite, size, args=(sections_for(size, transport),), timeout=480,
        env={"PHV_TEST_TRANSPORT": transport}))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("size", WORLD_SIZES)
def test_allreduce_every_dtype_op_algorithm(size, transport):
    values = section(launched(size, transport), "allreduce")
    assert all(v == values[0] and v > 1000 for v in values), values


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("size", LARGE_SIZES)
def test_allreduce_64mib(size, transport):
    section(launched(size, transport), "allreduce_large")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("size", WORLD_SIZES)
def test_allgatherv_broadcast_alltoallv_reducescatter_barrier(size, transport):
    section(launched(size, transport), "others")


@pytest.mark.parametrize("size", BAD_ARGUMENT_SIZES)
def test_bad_arguments_raise_before_communicating(size):
    section(launched(size, "shm"), "bad_arguments")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_timeout_then_peer_lost(transport):
    section(launched(2, transport), "timeout_then_peer_lost")


def test_store_from_python():
    from pyhorovod import _core
    server = _core.TcpStoreServer("127.0.0.1", 0, b"k")
    try:
        store = _core.TcpStore("127.0.0.1", server.port, b"k", 5.0)
        store.set("a", b"\x00\x01")
        assert store.get("a", 1.0) == b"\x00\x01"
        assert store.add("n", 2) == 2 and store.add("n", -5) == -3
        assert store.check("a") and not store.check("b")
        store.wait(["a", "n"], 1.0)
        with pytest.raises(_core.TimeoutError_, match="'b'"):
            store.wait(["a", "b"], 0.2)
        with pytest.raises(_core.InternalError, match="secret"):
            _core.TcpStore("127.0.0.1", server.port, b"wrong", 2.0)
    finally:
        server.close()
