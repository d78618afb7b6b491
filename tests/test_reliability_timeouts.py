"""Every collective has a deadline, and nothing blocks forever -- not init, not shutdown.

Terms: the *default deadline* is PYHOROVOD_TIMEOUT_SECONDS (1800 s unless set); `timeout=` on a call
overrides it for that request. A *laggard* is a rank that never submits a request the others submitted.
When the deadline passes, every rank that submitted it raises HorovodTimeoutError (a HorovodInternalError)
whose text names the op, the tensor name, the request number, the ranks that never submitted and the time
waited; the engine stays usable. Every test runs its ranks through tests/mp.py (hard timeout, every rank's
output on failure) and measures how long the failing call took.
"""
import os
import signal
import time

import numpy as np
import pytest

from fault_util import read_stamp, stamp, wait_for_files
from mp import free_port, run_ranks
from pyhorovod._config import Config


# ------------------------------------------------------------------ a laggard, the default deadline

def body_laggard(tmp, laggards):
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    x = np.arange(5, dtype=np.float32)
    assert np.array_equal(hvd.allreduce(x, op=hvd.Sum, name="warm"), x * n)
    out = None
    if r in laggards:
        # Submits nothing until every other rank has seen its error (then joins the next collective).
        assert wait_for_files([os.path.join(tmp, f"raised.{q}") for q in range(n) if q not in laggards], 30)
    else:
        t = time.monotonic()
        with pytest.raises(hvd.HorovodTimeoutError) as info:
            hvd.allreduce(x, op=hvd.Sum, name="stuck")
        out = {"elapsed": time.monotonic() - t, "message": str(info.value)}
        stamp(os.path.join(tmp, f"raised.{r}"))
    # The engine survived the timeout: the next collective is exact on every rank.
    assert np.array_equal(hvd.allreduce(x, op=hvd.Sum, name="after"), x * n)
    hvd.shutdown()
    return out


@pytest.mark.parametrize("size,laggards", [(2, [1]), (3, [2]), (4, [0, 3])])
def test_every_rank_but_the_laggards_raises_at_the_deadline(tmp_path, size, laggards):
    results = run_ranks(body_laggard, size, timeout=60, args=(str(tmp_path), laggards),
                        env={"PYHOROVOD_TIMEOUT_SECONDS": "2"})
    missing = ", ".join(map(str, laggards))
    for res in results:
        if res.rank in laggards:
            continue
        msg, elapsed = res.value["message"], res.value["elapsed"]
        assert msg.startswith(f"rank {res.rank}: allreduce 'stuck' (request #2)"), msg   # op, name, number
        assert f"ranks [{missing}] never submitted it" in msg, msg                        # who is missing
        assert "timed out after 2 s" in msg, msg                                          # time waited
        assert 1.9 <= elapsed < 5.0, (res.rank, elapsed)
        print(f"MEASURED laggard, size {size}, rank {res.rank}: HorovodTimeoutError after {elapsed:.2f} s "
              f"(deadline 2 s)")


# ------------------------------------------------------------------ per-call timeout= overrides it

def body_per_call(tmp):
    import pyhorovod as hvd
    hvd.init()
    r = hvd.rank()
    x = np.ones(4, np.float32)
    calls = {
        "allreduce": lambda t: hvd.allreduce(x, name="c.allreduce", timeout=t),
        "allreduce_": lambda t: hvd.allreduce_(x.copy(), name="c.allreduce_", timeout=t),
        "grouped_allreduce": lambda t: hvd.grouped_allreduce([x, x], name="c.grouped", timeout=t),
        "allgather": lambda t: hvd.allgather(x, name="c.allgather", timeout=t),
        "broadcast": lambda t: hvd.broadcast(x, root_rank=0, name="c.broadcast", timeout=t),
        "alltoall": lambda t: hvd.alltoall(x, name="c.alltoall", timeout=t),
        "reducescatter": lambda t: hvd.reducescatter(x, name="c.reducescatter", timeout=t),
        "barrier": lambda t: hvd.barrier(timeout=t),
    }
    out = {}
    if r == 0:
        for key, call in calls.items():
            t = time.monotonic()
            with pytest.raises(hvd.HorovodTimeoutError) as info:
                call(0.75)
            out[key] = {"elapsed": time.monotonic() - t, "message": str(info.value)}
        # Bad values are a ValueError on this rank alone: nothing is enqueued.
        for bad in (0, -1, float("inf"), float("nan"), "soon", True):
            with pytest.raises(ValueError, match="timeout must be"):
                hvd.allreduce(x, name="bad", timeout=bad)
        stamp(os.path.join(tmp, "done"))
    else:
        assert wait_for_files([os.path.join(tmp, "done")], 40)
    assert hvd.allreduce(x, op=hvd.Sum, name="end")[0] == 2   # rank 1's default deadline is 60 s
    hvd.shutdown()
    return out


def test_per_call_timeout_overrides_the_default(tmp_path):
    results = run_ranks(body_per_call, 2, timeout=90, args=(str(tmp_path),),
                        env={"PYHOROVOD_TIMEOUT_SECONDS": "60"})
    calls = results[0].value
    assert len(calls) == 8, calls
    for key, got in calls.items():
        msg = got["message"]
        assert "timed out after 0.75 s" in msg and "ranks [1] never submitted it" in msg, (key, msg)
        assert 0.7 <= got["elapsed"] < 3.0, (key, got)
        print(f"MEASURED per-call timeout=0.75, {key}: HorovodTimeoutError after {got['elapsed']:.2f} s")
    assert "allgather 'c.allgather'" in calls["allgather"]["message"]
    assert "barrier 'barrier.noname.1'" in calls["barrier"]["message"]


def test_default_deadline_is_30_minutes_and_the_environment_sets_it():
    assert Config.from_env({}).timeout_s == 1800.0
    assert Config.from_env({"PYHOROVOD_TIMEOUT_SECONDS": "7.5"}).timeout_s == 7.5
    for bad in ("0", "-3", "soon"):
        with pytest.raises(ValueError, match="PYHOROVOD_TIMEOUT_SECONDS"):
            Config.from_env({"PYHOROVOD_TIMEOUT_SECONDS": bad})


# ------------------------------------------------------------------ init never blocks forever

def body_init(absent):
    import pyhorovod as hvd
    if int(os.environ["PYHOROVOD_RANK"]) in absent:
        time.sleep(8)   # alive, but never shows up at the rendezvous
        return None
    t = time.monotonic()
    with pytest.raises(hvd.HorovodInternalError) as info:
        hvd.init()
    return {"elapsed": time.monotonic() - t, "message": str(info.value), "type": type(info.value).__name__}


def test_init_fails_within_the_connect_timeout_when_a_peer_never_arrives():
    results = run_ranks(body_init, 3, timeout=40, args=([2],),
                        env={"PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "3"})
    for res in results[:2]:
        got = res.value
        assert got["type"] == "HorovodTimeoutError", got
        assert got["message"].startswith(f"rank {res.rank}: cannot connect to rank 2"), got
        assert 2.9 <= got["elapsed"] < 7.0, got
        print(f"MEASURED init, rank 2 absent, rank {res.rank}: {got['type']} after {got['elapsed']:.2f} s "
              f"(connect timeout 3 s)")


def test_init_fails_within_the_connect_timeout_when_the_store_is_absent():
    port = free_port()  # nothing listens there
    env = lambda r: {"PYHOROVOD_RANK": str(r), "PYHOROVOD_SIZE": "2", "PYHOROVOD_STORE_ADDR": "127.0.0.1",
                     "PYHOROVOD_STORE_PORT": str(port), "PYHOROVOD_SECRET": "s3cret",
                     "PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "2"}
    results = run_ranks(body_init, 2, timeout=40, args=([],), launcher=None, env=env)
    for res in results:
        got = res.value
        assert f"rendezvous store 127.0.0.1:{port}" in got["message"], got
        assert "Connection refused" in got["message"], got
        assert 1.9 <= got["elapsed"] < 6.0, got
        print(f"MEASURED init, no store, rank {res.rank}: error after {got['elapsed']:.2f} s (connect timeout 2 s)")


# ------------------------------------------------------------------ shutdown never blocks forever

def body_shutdown_stopped_peer(tmp):
    import atexit
    import pyhorovod as hvd
    r = int(os.environ["PYHOROVOD_RANK"])
    if r == 0:
        # Registered before init, so it runs after pyhorovod's own atexit shutdown (LIFO).
        atexit.register(stamp, os.path.join(tmp, "exited.0"))
    hvd.init()
    hvd.allreduce(np.ones(3, np.float32), name="warm")
    if r == 2:
        with open(os.path.join(tmp, "pid.2"), "w") as f:
            f.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
        return None   # not reached: the test kills this rank
    time.sleep(0.5)   # rank 2 is stopped by now (it stopped right after the same collective)
    if r == 0:
        return None   # no explicit shutdown: the exit path must not hang either
    t = time.monotonic()
    hvd.shutdown()
    elapsed = time.monotonic() - t
    # Rank 0 has exited (after its atexit shutdown): release the stopped rank.
    exited = wait_for_files([os.path.join(tmp, "exited.0")], 20)
    with open(os.path.join(tmp, "pid.2")) as f:
        os.kill(int(f.read()), signal.SIGKILL)
    return {"shutdown_s": elapsed, "rank0_exited": exited, "rank0_exit_at": read_stamp(os.path.join(tmp, "exited.0"))}


def test_shutdown_and_exit_return_when_a_peer_is_stopped(tmp_path):
    t0 = time.time()
    results = run_ranks(body_shutdown_stopped_peer, 3, timeout=60, args=(str(tmp_path),), check=False,
                        env={"PYHOROVOD_TIMEOUT_SECONDS": "3"})
    report = "\n".join(f"rank {r.rank}: exit {r.returncode} value {r.value}\n{r.stderr[-2000:]}" for r in results)
    assert results[0].returncode == 0 and results[1].returncode == 0, report
    assert results[2].returncode == -signal.SIGKILL, report
    got = results[1].value
    # shutdown() waits at most min(timeout, 30) + 1 s for the round that carries the shutdown flag.
    assert got["shutdown_s"] < 6.0, report
    assert got["rank0_exited"] and got["rank0_exit_at"] - t0 < 30, report
    print(f"MEASURED shutdown() with a stopped peer: returned after {got['shutdown_s']:.2f} s (deadline 3 s)")
