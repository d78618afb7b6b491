"""Under `mpirun -np 3` with no rendezvous address: ranks come from Open MPI's variables and rank 0's
store address reaches the others through mpi4py (pyhorovod/_rendezvous.py). Skipped, with the reason,
where mpirun or mpi4py is missing; CI installs both."""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from mp import ROOT, clean_env

MPIRUN = shutil.which("mpirun")
pytestmark = [
    pytest.mark.skipif(MPIRUN is None, reason="mpirun (Open MPI) is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py is not installed"),
]


def mpi_body():
    import pyhorovod as hvd
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    assert hvd.rank_source() == "openmpi" and size == 3
    assert (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()) == (rank, 3, 0, 1)
    assert hvd.allreduce(np.arange(1000, dtype=np.float32) * rank, op=hvd.Sum).tolist() == \
        (np.arange(1000, dtype=np.float32) * 3).tolist()
    assert hvd.allgather(np.full((rank, 2), rank, np.int32)).tolist() == [[1, 1], [2, 2], [2, 2]]
    assert hvd.broadcast(np.array([rank, 7]), root_rank=1).tolist() == [1, 7]
    out, got = hvd.alltoall(np.arange(3) + 10 * rank, splits=[1, 1, 1])
    assert out.tolist() == [rank, 10 + rank, 20 + rank] and got.tolist() == [1, 1, 1]
    # shutdown + init reuses the store rank 0 hosts (no second broadcast)
    hvd.shutdown()
    hvd.init()
    assert hvd.allreduce(np.array([1]), op=hvd.Sum).tolist() == [3]
    hvd.shutdown()
    # One write with its newline: under a bare mpirun with an unbuffered stdout (PYTHONUNBUFFERED), print()
    # writes the text and the newline separately, and another rank's line can land in between.
    sys.stdout.write(json.dumps({"rank": rank, "ok": True}) + "\n")
    sys.stdout.flush()


def test_collectives_under_mpirun_with_mpi4py_rendezvous():
    env = clean_env({"PYHOROVOD_TIMEOUT_SECONDS": "40", "PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "40",
                     # containers: no ptrace-based single copy, and never ask for more slots
                     "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
                     "OMPI_MCA_rmaps_base_oversubscribe": "1"})
    child = ("import sys; sys.path[:0] = [%r, %r]; import test_mpirun; test_mpirun.mpi_body()"
             % (os.path.join(ROOT, "tests"), ROOT))
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "3", sys.executable, "-c", child]
    # Own process group, so that a timeout kills mpirun's ranks too, not only mpirun.
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"mpirun timed out after 120 s\nstdout:\n{out}\nstderr:\n{err}")
    assert proc.returncode == 0, f"mpirun exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(d["rank"] for d in lines if d["ok"]) == [0, 1, 2], out
