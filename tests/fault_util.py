"""Helpers for the reliability, security and soak tests: clocks shared between rank processes, resident
memory and open descriptors of a process, and the listening TCP sockets of given processes.

Times that cross process boundaries use time.time() (one machine, one clock): a victim writes the moment
it is killed (`stamp`), the survivors the moment their call raised, and the test subtracts. Each rank
measures durations of its own calls with time.monotonic().
"""
import os
import re
import subprocess
import time
from typing import Dict, Iterable, List, Optional, Tuple


def stamp(path: str) -> float:
    """Writes time.time() to path atomically (rename), returns it."""
    now = time.time()
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(repr(now))
    os.replace(tmp, path)
    return now


def read_stamp(path: str) -> Optional[float]:
    try:
        with open(path) as f:
            return float(f.read())
    except (FileNotFoundError, ValueError):
        return None


def write_pid_file(directory: str, rank) -> None:
    """directory/pid.<rank> holding this process's pid, written atomically (a temporary file renamed), so
    that a reader waiting for the file never sees it empty."""
    path = os.path.join(directory, f"pid.{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def wait_for_files(paths: Iterable[str], timeout: float) -> bool:
    """Polls until every path exists; False when the timeout passes first."""
    paths = list(paths)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(os.path.exists(p) for p in paths):
            return True
        time.sleep(0.02)
    return False


def rss_kb(pid="self") -> int:
    """Resident set size (VmRSS) in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def fd_count(pid="self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def thread_count(pid="self") -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


_SS_USER = re.compile(r"pid=(\d+)")


def listening(pids: Optional[Iterable[int]] = None) -> List[Tuple[str, int, int]]:
    """(address, port, pid) of every listening TCP socket (of the given pids only, if given): `ss -ltnpH`."""
    out = subprocess.run(["ss", "-H", "-ltnp"], capture_output=True, text=True, timeout=10).stdout
    wanted = None if pids is None else set(pids)
    rows = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        addr, _, port = fields[3].rpartition(":")
        addr = addr.strip("[]").split("%", 1)[0]
        for pid in map(int, _SS_USER.findall(" ".join(fields[5:]))):
            if wanted is None or pid in wanted:
                rows.append((addr, int(port), pid))
    return rows


def survivors_report(results) -> str:
    """Every rank's returned value, for assertion messages."""
    return "\n".join(f"rank {r.rank} (exit {r.returncode}): {r.value!r}\n{r.stderr[-3000:]}" for r in results)


def proc_children(ppid: int) -> Dict[int, Dict[str, str]]:
    """pid -> environment of the direct children of ppid (Linux /proc)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            if int(stat.rsplit(")", 1)[1].split()[1]) != ppid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            out[int(entry)] = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in env.items()}
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError, IndexError):
            continue
    return out


class StderrTimes:
    """Records when each line reaches this process's stderr (fd 2, so the C++ core's log lines too):
    fd 2 becomes a pipe read by a thread that passes every line on to the original stderr. `lines()`
    returns (time.time(), text) pairs; use as a context manager around the code to watch."""

    def __init__(self):
        import threading
        self._lines = []
        self._saved = os.dup(2)
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._reader = threading.Thread(target=self._pump, args=(read_fd,), daemon=True)
        self._reader.start()

    def _pump(self, read_fd):
        with os.fdopen(read_fd, "rb") as pipe:
            for raw in pipe:
                self._lines.append((time.time(), raw.decode(errors="replace").rstrip("\n")))
                os.write(self._saved, raw)

    def lines(self):
        return list(self._lines)

    def close(self):
        os.dup2(self._saved, 2)   # closes the pipe's last writer: the reader sees EOF
        self._reader.join(5)
        os.close(self._saved)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
