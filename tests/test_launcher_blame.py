"""Which rank the launcher blames when ranks fail inside real collectives. The rank that fails first makes
the others' collectives fail too ("has been shut down (rank 1 shut down)"), and those echoes often exit
*before* it (it is still in its atexit shutdown). The launcher must still name the cause, and show its
traceback last."""
import re
import time

import pytest

from runner_util import kill_leftovers, run_launcher, wait_gone, write_script

LOOP = """
import os, signal, sys
import numpy as np
import pyhorovod as hvd
hvd.init()
print(f"pid {os.getpid()}", flush=True)
mode, target = sys.argv[1], int(sys.argv[2])
for step in range(100000):
    if hvd.rank() == target and step == 20:
        if mode == "raise":
            raise ValueError(f"rank {hvd.rank()} root cause")
        os.kill(os.getpid(), signal.SIGKILL)
    hvd.allreduce(np.ones(1000, np.float32), name="g")
"""


@pytest.mark.parametrize("attempt", range(3))   # the race goes either way: try it a few times
def test_the_rank_that_raised_is_blamed_not_its_echoes(tmp_path, attempt):
    script = write_script(tmp_path, "loop.py", LOOP)
    r = run_launcher(["-np", "3", "python", script, "raise", "1"], timeout=90,
                     env={"PYHOROVOD_TIMEOUT_SECONDS": "30"})
    pids = [int(p) for p in re.findall(r"<stdout>:pid (\d+)", r.stdout)]
    try:
        assert r.returncode == 1, r
        err = r.lines("stderr")
        assert err[-2] == "    ValueError: rank 1 root cause", r
        assert re.fullmatch(r"\[pyhorovod\] job failed: rank 1 \(host localhost, pid \d+\) "
                            r"(exited with code 1|failed first and was stopped while exiting)", err[-1]), r
        assert wait_gone(pids, 5) == [], r
    finally:
        kill_leftovers(pids)


def test_a_killed_rank_is_blamed_not_the_peers_that_lost_it(tmp_path):
    script = write_script(tmp_path, "loop.py", LOOP)
    r = run_launcher(["-np", "3", "python", script, "sigkill", "2"], timeout=120,
                     env={"PYHOROVOD_TIMEOUT_SECONDS": "80"})
    pids = [int(p) for p in re.findall(r"<stdout>:pid (\d+)", r.stdout)]
    try:
        assert r.returncode == 137, r
        assert re.search(r"job failed: rank 2 \(host localhost, pid \d+\) was killed by SIGKILL \(signal 9\)$",
                         r.stderr.strip()), r
        assert r.elapsed < 60, r   # the peers noticed the loss at once, not at the 80 s collective deadline
        assert wait_gone(pids, 5) == [], r
    finally:
        kill_leftovers(pids)


STOPPED = """
import os, signal, sys, time
import numpy as np
import pyhorovod as hvd
hvd.init()
print(f"pid {os.getpid()}", flush=True)
catch = sys.argv[1] == "catch"
for step in range(100000):
    if hvd.rank() == 1 and step == 20:
        print(f"stopping at {time.time()}", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    try:
        hvd.allreduce(np.ones(1000, np.float32), name="g")
    except hvd.HorovodInternalError as e:
        if not catch:
            raise
        print(f"rank {hvd.rank()} giving up: {e}", file=sys.stderr, flush=True)
        sys.exit(3)
"""


@pytest.mark.parametrize("survivors", ["catch", "raise"])
def test_a_stopped_rank_is_blamed_not_the_survivors_that_timed_out_on_it(tmp_path, survivors):
    # The survivors' errors name rank 1 ("first failure: rank 1 reported no error"), however they exit:
    # with a traceback of their own, or a bare exit code after printing the error.
    script = write_script(tmp_path, "stopped.py", STOPPED)
    r = run_launcher(["-np", "3", "python", script, survivors], timeout=120,
                     env={"PYHOROVOD_TIMEOUT_SECONDS": "5"})
    ended = time.time()
    pids = [int(p) for p in re.findall(r"<stdout>:pid (\d+)", r.stdout)]
    try:
        assert r.returncode == (3 if survivors == "catch" else 1), r
        assert re.search(r"job failed: rank 1 \(host localhost, pid \d+\) stopped responding \(rank\(s\) "
                         r"\[(0|2|0, 2)\] name it as the first failure\) and was stopped by the launcher$",
                         r.stderr.strip()), r
        assert r.elapsed < 60, r
        assert wait_gone(pids, 5) == [], r   # the stopped rank too: SIGKILL ends a stopped process
        stopped_at = float(re.search(r"<stdout>:stopping at ([\d.]+)", r.stdout).group(1))
        print(f"MEASURED launcher blame, rank 1 SIGSTOPped, survivors {survivors}: launcher done "
              f"{ended - stopped_at:.2f} s after the stop (deadline 5 s), blaming rank 1")
    finally:
        kill_leftovers(pids)
