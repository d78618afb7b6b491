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


def _load_prctl():
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: ranks outlive a launcher killed with SIGKILL


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def die_with_launcher(launcher_pid: int):
    """preexec_fn for ranks: the kernel SIGKILLs the rank when the launcher dies, even when the launcher
    itself was SIGKILLed and could stop nobody (ranks live in their own sessions, so no terminal signal
    reaches them). A remote rank's ssh client dies the same way, and the remote wrapper then stops the rank.
    Only async-signal-safe work here: it runs between fork and exec."""
    def hook():
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != launcher_pid:  # the launcher died before prctl took effect
                os._exit(1)
    return hook


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
