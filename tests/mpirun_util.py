"""Running a module-level test function on every rank of a bare `mpirun` (Open MPI + mpi4py), with a
hard time limit that kills mpirun's whole process group. Each rank prints its JSON result line."""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from mp import ROOT, clean_env

MPIRUN = shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(MPIRUN is None or importlib.util.find_spec("mpi4py") is None,
                               reason="mpirun (Open MPI) or mpi4py is not installed")


def run_under_mpirun(module: str, function: str, np: int, timeout: float = 120):
    """Runs tests/<module>.py's function on np ranks; returns the JSON lines the ranks printed."""
    env = clean_env({"PYHOROVOD_TIMEOUT_SECONDS": "40", "PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "40",
                     # containers: no ptrace-based single copy, and never ask for more slots
                     "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
                     "OMPI_MCA_rmaps_base_oversubscribe": "1"})
    child = ("import sys; sys.path[:0] = [%r, %r]; import %s; %s.%s()"
             % (os.path.join(ROOT, "tests"), ROOT, module, module, function))
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(np), sys.executable, "-c", child]
    # Own process group, so that a timeout kills mpirun's ranks too, not only mpirun.
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"mpirun timed out after {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
    assert proc.returncode == 0, f"mpirun exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def print_result(record) -> None:
    """One write with its newline: under a bare mpirun with an unbuffered stdout (PYTHONUNBUFFERED),
    print() writes the text and the newline separately, and another rank's line can land in between."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()
