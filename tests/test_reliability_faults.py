"""A dead or stopped peer. Every surviving rank raises HorovodInternalError, naming the
rank that failed; a killed peer is noticed within seconds (its sockets close), a stopped one at the
deadline; and every later call's error quotes the first failure (which rank, and why).

The victim kills (or stops) itself from a timer thread while its main thread is inside a 4 MiB allreduce
loop, so the signal lands mid-collective. It writes the moment (time.time()) to a file just before; the
survivors record when their call raised; the difference is the time to error (printed as MEASURED lines).
Network faults (a cut link between namespaces, a lossy link) are in test_reliability_network.py.
"""
import os
import re
import signal
import time

import numpy as np
import pytest

from fault_util import read_stamp, stamp, survivors_report, wait_for_files
from mp import run_ranks

COUNT = 1 << 20   # float32 elements per allreduce: 4 MiB, many ring segments


def loop_until_error(hvd, name, max_s):
    """Exact allreduces until one raises; returns (iterations, time.time() of the error, message)."""
    r, n = hvd.rank(), hvd.size()
    x = np.arange(COUNT, dtype=np.float32) % 251 * (r + 1)
    want = np.arange(COUNT, dtype=np.float32) % 251 * (n * (n + 1) // 2)
    start, i = time.monotonic(), 0
    while time.monotonic() - start < max_s:
        try:
            y = hvd.allreduce(x, op=hvd.Sum, name=name)
        except hvd.HorovodInternalError as e:
            return i, time.time(), str(e), type(e).__name__
        assert np.array_equal(y, want), f"wrong result in iteration {i}"
        i += 1
    raise AssertionError(f"no error within {max_s} s ({i} iterations)")


def body_victim(tmp, victim, sig, survivors):
    import threading
    import pyhorovod as hvd
    hvd.init()
    r = hvd.rank()
    hvd.barrier()
    if r == victim:
        with open(os.path.join(tmp, "victim.pid"), "w") as f:
            f.write(str(os.getpid()))

        def strike():
            stamp(os.path.join(tmp, "struck"))
            os.kill(os.getpid(), sig)
        threading.Timer(1.5, strike).start()
    iterations, t_err, message, kind = loop_until_error(hvd, "big", 60)
    # A later call: its error must quote the first failure, not just "shut down".
    with pytest.raises(hvd.HorovodInternalError) as later:
        hvd.allreduce(np.ones(3, np.float32), name="later")
    t0 = time.monotonic()
    hvd.shutdown()
    shutdown_s = time.monotonic() - t0
    stamp(os.path.join(tmp, f"done.{r}"))
    if sig == signal.SIGSTOP and r == min(survivors):
        # The stopped rank never exits by itself: release it once every survivor has its answer.
        wait_for_files([os.path.join(tmp, f"done.{q}") for q in survivors], 30)
        with open(os.path.join(tmp, "victim.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
    return {"iterations": iterations, "t_err": t_err, "message": message, "kind": kind,
            "later": str(later.value), "shutdown_s": shutdown_s}


def names_rank(text, rank, me):
    """True when `text` (said by rank `me`, which is not `rank`) names `rank`."""
    assert rank != me
    return re.search(rf"\brank {rank}\b", text) is not None


def check_survivors(results, victim, sig, t_strike, max_s, min_s=0.0):
    report = survivors_report(results)
    assert results[victim].returncode == -signal.SIGKILL, report
    for res in results:
        if res.rank == victim:
            continue
        assert res.returncode == 0 and res.value, report
        got = res.value
        delay = got["t_err"] - t_strike
        what = "SIGKILL" if sig == signal.SIGKILL else "SIGSTOP"
        print(f"MEASURED {what} of rank {victim} of {len(results)}, rank {res.rank}: {got['kind']} after "
              f"{delay:.2f} s ({got['iterations']} allreduces before); shutdown() {got['shutdown_s']:.2f} s")
        assert min_s <= delay < max_s, (res.rank, delay, report)
        assert names_rank(got["message"], victim, res.rank), (res.rank, got["message"])
        # The later error says the engine stopped, and why: the same first failure, naming the victim.
        assert "stopped after an error" in got["later"] or "shut down" in got["later"], got["later"]
        assert names_rank(got["later"], victim, res.rank), (res.rank, got["later"])
        assert got["shutdown_s"] < 5.0, (res.rank, got)
    # Every survivor's engine stopped: the same class everywhere, whether a rank's own transfer failed
    # or it saw another rank's sockets close (test_reliability_stall.py has the reasoning).
    kinds = {res.value["kind"] for res in results if res.rank != victim}
    assert kinds == {"HorovodInternalError"}, report


@pytest.mark.parametrize("size,victim", [(2, 1), (3, 2), (3, 0), (4, 1)])
def test_sigkill_mid_allreduce_is_noticed_within_seconds(tmp_path, size, victim):
    survivors = [q for q in range(size) if q != victim]
    # The deadline is 60 s: an error well before it means the loss itself was detected.
    results = run_ranks(body_victim, size, timeout=100, grace=30, check=False,
                        args=(str(tmp_path), victim, int(signal.SIGKILL), survivors),
                        env={"PYHOROVOD_TIMEOUT_SECONDS": "60"})
    check_survivors(results, victim, signal.SIGKILL, read_stamp(str(tmp_path / "struck")), max_s=5.0)


@pytest.mark.parametrize("size,victim", [(2, 1), (3, 2), (3, 0)])
def test_sigstop_mid_allreduce_times_out_naming_the_stopped_rank(tmp_path, size, victim):
    survivors = [q for q in range(size) if q != victim]
    results = run_ranks(body_victim, size, timeout=100, grace=30, check=False,
                        args=(str(tmp_path), victim, int(signal.SIGSTOP), survivors),
                        env={"PYHOROVOD_TIMEOUT_SECONDS": "3"})
    # Not before the deadline (nothing closed), and not long after it (3 s + 1 s round grace + reporting).
    check_survivors(results, victim, signal.SIGSTOP, read_stamp(str(tmp_path / "struck")), max_s=8.0,
                    min_s=1.0)


# ------------------------------------------------------------------ a rank that raises (no signal)

def body_raiser(tmp):
    import pyhorovod as hvd
    hvd.init()
    r = hvd.rank()
    hvd.barrier()
    if r == 1:
        hvd.allreduce(np.ones(8, np.float32), name="g")
        stamp(os.path.join(tmp, "struck"))
        raise SystemExit(3)   # exits without shutdown: atexit runs pyhorovod's shutdown
    hvd.allreduce(np.ones(8, np.float32), name="g")
    t = time.monotonic()
    with pytest.raises(hvd.HorovodInternalError) as info:
        for _ in range(100000):
            hvd.allreduce(np.ones(8, np.float32), name="g")
    return {"elapsed": time.monotonic() - t, "message": str(info.value)}


def test_a_rank_that_exits_makes_the_others_fail_naming_it(tmp_path):
    results = run_ranks(body_raiser, 3, timeout=60, grace=30, check=False, args=(str(tmp_path),),
                        env={"PYHOROVOD_TIMEOUT_SECONDS": "60"})
    report = survivors_report(results)
    assert results[1].returncode == 3, report
    for res in (results[0], results[2]):
        assert res.returncode == 0, report
        msg = res.value["message"]
        # A clean exit shuts the engine down collectively: the others hear "rank 1 shut down".
        assert "rank 1" in msg and "shut down" in msg, msg
        assert res.value["elapsed"] < 5.0, res.value
        print(f"MEASURED rank 1 of 3 exits (atexit shutdown), rank {res.rank}: error after "
              f"{res.value['elapsed']:.2f} s")
