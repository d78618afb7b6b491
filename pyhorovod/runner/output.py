"""Rank output: each line a rank prints is shown with a prefix, `[3]<stdout>:text` (Horovod's format),
optionally copied without the prefix to `<output-dir>/rank.<N>/{stdout,stderr}`, and the last lines of
each stream are kept so the launcher can repeat a failing rank's traceback at the very end."""
from __future__ import annotations

import collections
import os
import re
import sys
import threading
import time
from typing import BinaryIO, Deque, Dict, List, Optional, Tuple

TAIL_LINES = 60
# How a collective error names a rank that fell silent (csrc/engine/failure_board.cc): it published no
# error of its own because it is stopped, hung, dead or cut off.
_SILENT_FIRST_FAILURE = re.compile(rb"\[first failure: rank (\d+) reported no error")

_write_lock = threading.Lock()  # whole lines from different ranks never interleave


def rank_log_dir(output_dir: str, rank: int) -> str:
    return os.path.join(output_dir, f"rank.{rank}")


def line_prefix(rank: int, stream: str, timestamp: bool = False) -> bytes:
    """`[rank]<stream>:`, after the local time (as time.asctime() writes it) when timestamp is set."""
    stamp = time.asctime() if timestamp else ""
    return f"{stamp}[{rank}]<{stream}>:".encode()


class StreamPump:
    """Copies one pipe (a rank's stdout or stderr) line by line on a background thread."""

    def __init__(self, rank: int, name: str, pipe: BinaryIO, sink: BinaryIO,
                 log_path: Optional[str] = None, log_header: Optional[str] = None, timestamp: bool = False):
        self.rank = rank
        self.name = name
        self._pipe = pipe
        self._sink = sink
        self._timestamp = timestamp
        self.tail: Deque[bytes] = collections.deque(maxlen=TAIL_LINES)
        self.first_traceback: Optional[float] = None  # monotonic time of the first Python traceback line
        self.silent_rank: Optional[int] = None  # the first rank a line of ours named as a silent first failure
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
                if self.silent_rank is None and b"[first failure: rank " in line:
                    named = _SILENT_FIRST_FAILURE.search(line)
                    self.silent_rank = int(named.group(1)) if named else None
                with _write_lock:
                    try:
                        self._sink.write(line_prefix(self.rank, self.name, self._timestamp) + line)
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


# Open MPI's `--tag-output` prefix: `[jobid,rank]<stream>:`.
_MPI_TAG = re.compile(rb"\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:")


class MpiTaggedDemux:
    """Turns one of mpirun's `--tag-output` streams back into whole lines per rank.

    mpirun (Open MPI 4) tags every *write* a rank makes, not every line: a rank that writes "RESULT x"
    and then "\n" in two calls (print() on an unbuffered stream does exactly that) appears as
    `[1,0]<stdout>:RESULT x[1,0]<stdout>:\n`, with other ranks' fragments possibly in between. So the
    stream is a sequence of *fragments*, each a tag followed by text up to the end of a line or up to
    the next tag. Fragments are appended to a per-(rank, stream) line buffer, and each completed line
    is written once as `[rank]<stream>:line` (the format of pyhorovod's own launcher). Text that does not
    start with a tag (mpirun's own messages) is passed through as it is. A rank line that itself
    contains a tag-shaped string is cut there: the format leaves no way to tell the two apart."""

    def __init__(self, sink: BinaryIO, timestamp: bool = False):
        self._sink = sink
        self._timestamp = timestamp
        self._buf = b""
        self._partial: Dict[Tuple[int, bytes], bytes] = {}   # (rank, stream) -> its unfinished line

    def feed(self, data: bytes) -> None:
        self._buf += data
        self._drain(final=False)

    def close(self) -> None:
        """End of the stream: unfinished fragments and lines become lines of their own."""
        self._drain(final=True)
        for (rank, stream), text in sorted(self._partial.items()):
            if text:
                self._line(rank, stream, text + b"\n")
        self._partial.clear()

    def _drain(self, final: bool) -> None:
        buf, pos = self._buf, 0
        while pos < len(buf):
            tag = _MPI_TAG.match(buf, pos)
            start = tag.end() if tag else pos
            newline = buf.find(b"\n", start)
            following = _MPI_TAG.search(buf, start, newline if newline >= 0 else len(buf))
            if following is not None:
                end = following.start()
            elif newline >= 0:
                end = newline + 1
            elif final:
                end = len(buf)
            else:
                break  # the fragment may go on in the next read, or the buffer ends inside a tag: wait
            text = buf[start:end]
            if tag is None:
                self._write(text)
            else:
                rank, stream = int(tag.group(2)), tag.group(3).replace(b"stddiag", b"stderr")
                line = self._partial.pop((rank, stream), b"") + text
                if line.endswith(b"\n"):
                    self._line(rank, stream, line)
                else:
                    self._partial[(rank, stream)] = line
            pos = end
        self._buf = buf[pos:]

    def _line(self, rank: int, stream: bytes, line: bytes) -> None:
        self._write(line_prefix(rank, stream.decode(), self._timestamp) + line)

    def _write(self, data: bytes) -> None:
        with _write_lock:
            try:
                self._sink.write(data)
                self._sink.flush()
            except (OSError, ValueError):
                pass  # our own stdout is gone: keep draining mpirun


def pump_mpi_stream(pipe: BinaryIO, sink: BinaryIO, timestamp: bool = False) -> threading.Thread:
    """Reads one of mpirun's pipes on a background thread through a MpiTaggedDemux into sink."""
    demux = MpiTaggedDemux(sink, timestamp)

    def run() -> None:
        try:
            while True:
                data = os.read(pipe.fileno(), 65536)
                if not data:
                    break
                demux.feed(data)
        except OSError:
            pass
        finally:
            demux.close()

    thread = threading.Thread(target=run, name="pump-mpirun", daemon=True)
    thread.start()
    return thread


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
