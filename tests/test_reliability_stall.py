"""A peer stopped in the middle of a ring (SIGSTOP): the data plane honours the stall inspector's times.

- HOROVOD_STALL_CHECK_TIME_SECONDS: once no byte of a running collective has moved for that long, every
  rank waiting for the stopped peer logs a warning naming the op and the peer (again each period).
- HOROVOD_STALL_SHUTDOWN_TIME_SECONDS: after that long without progress the op fails (and the engine
  stops, as after any broken transfer), long before the collective's deadline.
- Both sides of the broken ring raise the same class, HorovodInternalError: the engine is gone on every
  rank (HorovodTimeoutError is for a request that timed out in a working engine).

The victim stops itself from a timer thread while its main thread is inside a 4 MiB allreduce loop (as in
test_reliability_faults.py); the survivors timestamp every line of their stderr (fault_util.StderrTimes).
"""
import os
import re
import signal
import threading

import pytest

from fault_util import StderrTimes, read_stamp, stamp, survivors_report, wait_for_files
from mp import run_ranks
from test_reliability_faults import loop_until_error

# What is stalled: the op itself, or -- on a rank whose part of the ring is done -- the negotiation round
# of its next request ("negotiation round 7 (the exchange with the coordinator, rank 0, for allreduce ...").
WARNING = re.compile(r"WARNING\] rank (\d+): (.+?) has not moved a byte for ([\d.]+) s")


def body_stall(tmp, victim, survivors):
    import pyhorovod as hvd
    hvd.init()
    r = hvd.rank()
    hvd.barrier()
    if r == victim:
        def strike():
            with open(os.path.join(tmp, "victim.pid"), "w") as f:
                f.write(str(os.getpid()))
            stamp(os.path.join(tmp, "struck"))
            os.kill(os.getpid(), signal.SIGSTOP)
        threading.Timer(1.5, strike).start()
        loop_until_error(hvd, "big", 60)
        return None  # not reached: the test kills this rank
    with StderrTimes() as err:
        iterations, t_err, message, kind = loop_until_error(hvd, "big", 60)
    hvd.shutdown()
    stamp(os.path.join(tmp, f"done.{r}"))
    if r == min(survivors):
        wait_for_files([os.path.join(tmp, f"done.{q}") for q in survivors], 30)
        with open(os.path.join(tmp, "victim.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
    warnings = [(t, line) for t, line in err.lines()
                if WARNING.search(line) and "allreduce 'big'" in WARNING.search(line).group(2)]
    return {"iterations": iterations, "t_err": t_err, "message": message, "kind": kind, "warnings": warnings}


def run_stall(tmp_path, size, victim, env):
    survivors = [q for q in range(size) if q != victim]
    results = run_ranks(body_stall, size, timeout=100, grace=40, check=False,
                        args=(str(tmp_path), victim, survivors), env=env)
    report = survivors_report(results)
    assert results[victim].returncode == -signal.SIGKILL, report
    for q in survivors:
        assert results[q].returncode == 0 and results[q].value, report
    return [results[q].value for q in survivors], read_stamp(str(tmp_path / "struck")), report


@pytest.mark.parametrize("size,victim", [(2, 1), (3, 2)])
def test_a_stalled_transfer_is_reported_at_the_stall_check_time(tmp_path, size, victim):
    check_s = 2.0
    got, t_strike, report = run_stall(tmp_path, size, victim, {
        "PYHOROVOD_TIMEOUT_SECONDS": "9", "HOROVOD_STALL_CHECK_TIME_SECONDS": f"{check_s:g}"})
    named = []
    for g in got:
        assert g["warnings"], report
        t_warn, line = g["warnings"][0]
        delay = t_warn - t_strike
        print(f"MEASURED SIGSTOP of rank {victim} of {size}: first stall warning after {delay:.2f} s "
              f"(HOROVOD_STALL_CHECK_TIME_SECONDS={check_s:g}), error after {g['t_err'] - t_strike:.2f} s; {line}")
        assert check_s - 0.5 <= delay < check_s + 2.5, (delay, line)
        assert float(WARNING.search(line).group(3)) >= check_s
        # The peer it waits for, with its address: the stopped rank for its ring neighbours (a rank
        # further along waits for a neighbour that waits for the stopped one).
        named.append(re.search(rf"\brank {victim} \(", line) is not None)
        # Only a warning: the op still fails at its deadline (9 s), not at the check time.
        assert g["t_err"] - t_strike > 6.0, (g["t_err"] - t_strike, report)
        assert g["kind"] == "HorovodInternalError", g
    assert any(named), report


@pytest.mark.parametrize("size,victim", [(2, 1), (3, 2), (3, 0)])
def test_the_stall_shutdown_time_fails_a_stalled_transfer(tmp_path, size, victim):
    shutdown_s = 3.0
    got, t_strike, report = run_stall(tmp_path, size, victim, {
        "PYHOROVOD_TIMEOUT_SECONDS": "60", "HOROVOD_STALL_CHECK_TIME_SECONDS": "1",
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": f"{shutdown_s:g}"})
    kinds = {g["kind"] for g in got}
    for g in got:
        delay = g["t_err"] - t_strike
        print(f"MEASURED SIGSTOP of rank {victim} of {size}: {g['kind']} after {delay:.2f} s "
              f"(HOROVOD_STALL_SHUTDOWN_TIME_SECONDS={shutdown_s:g}, deadline 60 s)")
        assert shutdown_s - 0.5 <= delay < shutdown_s + 4.0, (delay, report)
        assert re.search(rf"\brank {victim}\b", g["message"]), g["message"]
        assert "allreduce 'big'" in g["message"], g["message"]
    # One of the survivors hit the limit itself; the others saw its sockets close: the same class.
    assert kinds == {"HorovodInternalError"}, got
    assert any("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" in g["message"] for g in got), got
