"""Helpers for the launcher tests: run `python -m pyhorovod.run ...` with a hard deadline, in a clean
environment, and show everything it printed when a check fails."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Rank variables a surrounding launcher (a CI job under Slurm, a shell with leftovers) may have set.
_STRIP_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "SLURM_", "MPI_LOCAL", "PYHOROVOD_", "TORCHELASTIC_")
_STRIP_NAMES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                "MASTER_ADDR", "MASTER_PORT", "HOROVOD_START_TIMEOUT"}


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_STRIP_PREFIXES) and k not in _STRIP_NAMES and not k.startswith("HOROVOD_")}
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def write_script(directory, name: str, body: str) -> str:
    path = os.path.join(str(directory), name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(body))
    return path


class Result:
    def __init__(self, args, returncode: int, stdout: str, stderr: str, elapsed: float):
        self.args, self.returncode, self.stdout, self.stderr, self.elapsed = args, returncode, stdout, stderr, elapsed

    def __repr__(self) -> str:  # shown by pytest when an assert on the result fails
        return (f"launcher {self.args!r}\nexit {self.returncode} after {self.elapsed:.1f}s\n"
                f"----- stdout -----\n{self.stdout}\n----- stderr -----\n{self.stderr}")

    def lines(self, stream: str = "stdout") -> List[str]:
        return getattr(self, stream).splitlines()


def launcher_argv(args: Sequence[str]) -> List[str]:
    return [sys.executable, "-m", "pyhorovod.run", *args]


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the launcher (it stops its ranks), SIGKILL to its group if it does not go."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def run_launcher(args: Sequence[str], timeout: float = 60, env: Optional[Dict[str, str]] = None,
                 cwd: Optional[str] = None, prefix: Sequence[str] = ()) -> Result:
    """Runs the launcher to completion; on timeout it is stopped and an AssertionError shows its output."""
    argv = [*prefix, *launcher_argv(args)]
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(env), cwd=cwd or ROOT, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        out, err = proc.communicate()
        raise AssertionError(repr(Result(argv, -1, out, err, time.monotonic() - start))
                             + f"\n(killed after the {timeout}s test deadline)")
    return Result(argv, proc.returncode, out, err, time.monotonic() - start)


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_gone(pids: Sequence[int], timeout: float) -> List[int]:
    """Waits until none of pids is alive; returns those still alive after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


def kill_leftovers(pids: Sequence[int]) -> None:
    for p in pids:
        if pid_alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
