"""Rank output: each line a rank prints is shown with a prefix, `[3]<stdout>:text` (Horovod's format),
optionally copied without the prefix to `<output-dir>/rank.<N>/{stdout,stderr}`, and the last lines of
each stream are kept so the launcher can repeat a failing rank's traceback at the very end."""
from __future__ import annotations

import collections
import os
import sys
import threading
import time
from typing import BinaryIO, Deque, List, Optional

TAIL_LINES = 60

_write_lock = threading.Lock()  # whole lines from different ranks never interleave


def rank_log_dir(output_dir: str, rank: int) -> str:
    return os.path.join(output_dir, f"rank.{rank}")


class StreamPump:
    """Copies one pipe (a rank's stdout or stderr) line by line on a background thread."""

    def __init__(self, rank: int, name: str, pipe: BinaryIO, sink: BinaryIO,
                 log_path: Optional[str] = None, log_header: Optional[str] = None):
        self.rank = rank
        self.name = name
        self._pipe = pipe
        self._sink = sink
        self._prefix = f"[{rank}]<{name}>:".encode()
        self.tail: Deque[bytes] = collections.deque(maxlen=TAIL_LINES)
        self.first_traceback: Optional[float] = None  # monotonic time of the first Python traceback line
        self._log: Optional[BinaryIO] = None
        if log_path is not None:
            os.makedirs(os.path.dirname(log_path), exist_ok=True)
            # Append across restarts so that the log of a failed attempt is not lost.
            self._log = open(log_path, "ab")
            if log_header:
                self._log.write(log_header.encode() + b"\n")
        self._thread = threading.Thread(target=self._run, name=f"pump-{rank}-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for line in iter(self._pipe.readline, b""):
                if not line.endswith(b"\n"):
                    line += b"\n"  # a last line without newline still gets a line of its own
                self.tail.append(line)
                if self.first_traceback is None and line.startswith(b"Traceback (most recent call last):"):
                    self.first_traceback = time.monotonic()
                with _write_lock:
                    try:
                        self._sink.write(self._prefix + line)
                        self._sink.flush()
                    except (OSError, ValueError):
                        pass  # our own stdout is gone (closed pipe): keep draining the rank
                if self._log is not None:
                    self._log.write(line)
                    self._log.flush()
        except (OSError, ValueError):
            pass
        finally:
            if self._log is not None:
                self._log.close()

    def join(self, timeout: float) -> bool:
        """Waits until the rank's end of the pipe is closed; False if it is still open after timeout
        (a grandchild of the rank may hold it; the daemon thread is then left behind: closing a pipe
        that another thread is reading would block on the reader's lock)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def tail_text(self) -> str:
        return b"".join(self.tail).decode(errors="replace")


def stdout_sink() -> BinaryIO:
    return sys.stdout.buffer


def stderr_sink() -> BinaryIO:
    return sys.stderr.buffer


def emit(message: str, verbose_only: bool = False, verbose: bool = True) -> None:
    """A launcher message on stderr, under the same lock as the ranks' lines."""
    if verbose_only and not verbose:
        return
    with _write_lock:
        sys.stderr.write(f"[pyhorovod] {message}\n")
        sys.stderr.flush()


def indent(lines: List[str], prefix: str = "    ") -> str:
    return "".join(prefix + line if line.endswith("\n") else prefix + line + "\n" for line in lines)
