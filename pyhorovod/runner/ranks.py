"""One started rank, seen from the launcher: its process (the rank itself, or the ssh client of a remote
rank), its exit, its output pumps, and how much of the job's failure it is to blame for."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from typing import Optional

from .hosts import SlotInfo


# Runs between the launcher and a rank, as `python -I -S -c EXEC_WRAPPER LAUNCHER_PID ERROR_FD ARGV...`:
# asks the kernel to SIGKILL this process when the launcher dies (PR_SET_PDEATHSIG, kept across exec),
# then execs the rank's program in its place (same pid). Ranks live in their own sessions, so without it
# no terminal signal reaches them when the launcher is SIGKILLed and can stop nobody; a remote rank's
# ssh client dies the same way, and the remote wrapper then stops the rank. This is done by exec rather
# than in a preexec_fn, which CPython documents as unsafe while other threads run (the output threads
# of the ranks already started): the forked child could deadlock on a lock held by one of them.
# If exec fails, the errno and its text go back through ERROR_FD (closed by a successful exec).
EXEC_WRAPPER = """\
import os, sys
launcher, error_fd, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
except (OSError, AttributeError):
    pass  # not Linux: ranks outlive a launcher killed with SIGKILL
if os.getppid() != launcher:  # the launcher died before the request took effect
    os._exit(1)
os.set_inheritable(error_fd, False)
try:
    os.execvp(argv[0], argv)
except OSError as e:
    os.write(error_fd, f"{e.errno} {e.strerror}".encode())
    os._exit(127)
"""
EXEC_REPORT_TIMEOUT_S = 60.0   # how long the wrapper may take to exec (a loaded machine: seconds)


def start_rank_process(argv, **popen_kwargs) -> subprocess.Popen:
    """Starts argv (a rank, or the agent of a remote rank) through EXEC_WRAPPER in a new session (so
    its pid is its process group, which the launcher signals), stdout and stderr piped. Raises OSError
    as Popen would when argv cannot be executed."""
    import select
    import sys

    read_fd, write_fd = os.pipe()
    try:
        wrapped = [sys.executable, "-I", "-S", "-c", EXEC_WRAPPER, str(os.getpid()), str(write_fd), *argv]
        proc = subprocess.Popen(wrapped, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                pass_fds=(write_fd,), **popen_kwargs)
        os.close(write_fd)
        write_fd = -1
        report = b""
        deadline = time.monotonic() + EXEC_REPORT_TIMEOUT_S
        while time.monotonic() < deadline:
            if select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                data = os.read(read_fd, 4096)
                if not data:
                    break   # exec succeeded: the pipe closed with it
                report += data
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    if report:
        proc.wait(EXEC_REPORT_TIMEOUT_S)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        code, _, text = report.decode(errors="replace").partition(" ")
        raise OSError(int(code), text, argv[0])
    return proc


# The last line of a Python traceback whose exception is one of pyhorovod's collective errors.
_COLLECTIVE_ERROR = re.compile(r"^(pyhorovod\.[\w.]*\.)?Horovod\w*Error\b")


def feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.flush()
    except (OSError, ValueError):
        pass  # the agent died at once (its exit status tells why) or the launcher closed the pipe


class RankProcess:
    """One started rank: the local process (the rank itself, or the ssh client of a remote rank)."""

    def __init__(self, slot: SlotInfo, proc: subprocess.Popen, is_remote: bool, pumps, wake: threading.Event):
        self.slot = slot
        self.proc = proc
        self.is_remote = is_remote
        self.pumps = pumps                   # [stdout pump, stderr pump]
        self.returncode: Optional[int] = None
        self.exit_time: Optional[float] = None
        self.stopped_by_launcher = False
        self._wake = wake
        threading.Thread(target=self._wait, name=f"wait-{slot.rank}", daemon=True).start()

    def _wait(self) -> None:
        code = self.proc.wait()
        self.exit_time = time.monotonic()
        self.returncode = code
        self._wake.set()

    @property
    def running(self) -> bool:
        return self.returncode is None

    def signal(self, sig: int) -> None:
        if self.running:
            self.stopped_by_launcher = True
        if self.is_remote and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()   # end-of-file tells the remote wrapper to stop the rank
            except OSError:
                pass
        try:
            os.killpg(self.proc.pid, sig)  # start_new_session made the pid the group id
        except (ProcessLookupError, PermissionError):
            pass

    def describe_exit(self) -> str:
        code = self.returncode
        where = f"rank {self.slot.rank} (host {self.slot.hostname}, pid {self.proc.pid})"
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"{where} was killed by {name} (signal {-code})"
        return f"{where} exited with code {code}"

    def exit_status(self) -> int:
        """Launcher exit status for this rank's failure: its exit code, or 128+N for signal N."""
        code = self.returncode or 0
        return 128 - code if code < 0 else code

    def failure_time(self) -> Optional[float]:
        """When this rank started to fail: its first Python traceback line, else its own non-zero exit.
        A rank that raises prints its traceback *before* its atexit shutdown tells the peers, so the
        peers' consequential errors always come later, even when they exit first."""
        if self.returncode == 0:
            return None
        times = [t for t in (self.pumps[1].first_traceback, self.pumps[0].first_traceback) if t is not None]
        if not self.stopped_by_launcher and self.exit_time is not None:
            times.append(self.exit_time)
        return min(times) if times else None

    def silent_rank(self) -> Optional[int]:
        """The other rank this rank's collective errors name as the first failure that reported nothing
        (stopped, hung, dead or cut off), if they name one."""
        named = [p.silent_rank for p in self.pumps if p.silent_rank not in (None, self.slot.rank)]
        return named[0] if named else None

    def consequential(self) -> bool:
        """Whether this rank died of a collective error (HorovodInternalError, its subclasses), or its
        output names another rank as the first failure: usually the echo of another rank's failure
        ("has been shut down (rank 1 shut down)"), not a cause -- however the script then exits."""
        if self.silent_rank() is not None:
            return True
        lines = [l for l in self.pumps[1].tail_text().splitlines() if l.strip()]
        return bool(lines) and _COLLECTIVE_ERROR.match(lines[-1]) is not None


def stop_ranks(ranks, sig: int, grace_s: float) -> None:
    """sig to every running rank's group, SIGKILL after grace_s, then drain their output."""
    running = [r for r in ranks if r.running]
    for r in running:
        r.signal(sig)
    deadline = time.monotonic() + grace_s
    while any(r.running for r in running) and time.monotonic() < deadline:
        time.sleep(0.02)
    for r in ranks:
        if r.running:
            r.signal(signal.SIGKILL)
        elif r.proc.stdin is not None and not r.proc.stdin.closed:
            try:
                r.proc.stdin.close()
            except OSError:
                pass
    deadline = time.monotonic() + 5.0
    while any(r.running for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.02)
    for r in ranks:
        for pump in r.pumps:
            pump.join(max(0.1, deadline - time.monotonic()))
