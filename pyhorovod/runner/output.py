"""Rank output: each line a rank prints is shown with a prefix, `[3]<stdout>:text` (Horovod's format),
optionally copied without the prefix to `<output-dir>/rank.<N>/{stdout,stderr}`, and the last lines of
each stream are kept so the launcher can repeat a failing rank's traceback at the very end. A piece
ending with a carriage return (a progress bar's redraw) is shown at once, prefixed and ending with its
`\r`, so that on a terminal the next piece of that rank draws over it."""
from __future__ import annotations

import collections
import os
import re
import sys
import threading
import time
from typing import BinaryIO, Callable, Deque, Dict, List, Optional, Set, Tuple

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


def split_pieces(buf: bytes) -> Tuple[List[bytes], bytes]:
    """Cuts buf into *pieces*: text up to and including a line end, `\n`, `\r\n` or a lone `\r` (how
    progress bars redraw a line). Returns (the complete pieces, the unfinished rest). A `\r` at the very
    end counts as lone: the bar must show now, not when more output comes (see StreamPump._write)."""
    pieces, pos = [], 0
    while True:
        ends = [i for i in (buf.find(b"\n", pos), buf.find(b"\r", pos)) if i >= 0]
        if not ends:
            return pieces, buf[pos:]
        end = min(ends) + 1
        if buf[end - 1:end] == b"\r" and buf[end:end + 1] == b"\n":
            end += 1
        pieces.append(buf[pos:end])
        pos = end


class StreamPump:
    """Copies one pipe (a rank's stdout or stderr) piece by piece (split_pieces) on a background thread.

    sink None: the console does not show this rank (--ranks-filter); its log file and tail are kept.
    on_sink_closed: called once when writing to the sink fails with a broken pipe (the reader of the
    launcher's output went away, e.g. `| head`); the pump then stops writing there but keeps draining."""

    def __init__(self, rank: int, name: str, pipe: BinaryIO, sink: Optional[BinaryIO],
                 log_path: Optional[str] = None, log_header: Optional[str] = None, timestamp: bool = False,
                 on_sink_closed: Optional[Callable[[], None]] = None):
        self.rank = rank
        self.name = name
        self._pipe = pipe
        self._sink = sink
        self._timestamp = timestamp
        self._on_sink_closed = on_sink_closed
        self._after_cr = False   # the last piece ended with a lone \r (a \n may still follow)
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
        rest = b""
        try:
            while True:
                data = os.read(self._pipe.fileno(), 65536)
                if not data:
                    break
                pieces, rest = split_pieces(rest + data)
                for piece in pieces:
                    self._piece(piece)
            if rest:
                self._piece(rest + b"\n")  # a last line without newline still gets a line of its own
        except (OSError, ValueError):
            pass
        finally:
            if self._log is not None:
                self._log.close()

    def _piece(self, piece: bytes) -> None:
        if self._log is not None:
            self._log.write(piece)   # the rank's bytes as they came, \r included
            self._log.flush()
        if self._after_cr and piece == b"\n":
            # The \n of a \r\n cut by the read: it ends the line already shown, no new prefix.
            self._after_cr = False
            self._write(piece)
            return
        self._after_cr = piece.endswith(b"\r")
        if piece.endswith(b"\n"):   # the tail keeps whole lines only, not every redraw of a bar
            self.tail.append(piece)
        if self.first_traceback is None and piece.startswith(b"Traceback (most recent call last):"):
            self.first_traceback = time.monotonic()
        if self.silent_rank is None and b"[first failure: rank " in piece:
            named = _SILENT_FIRST_FAILURE.search(piece)
            self.silent_rank = int(named.group(1)) if named else None
        if piece == b"\r":
            self._write(piece)   # a redraw that begins with \r: the prefix goes with the text that follows
            return
        self._write(line_prefix(self.rank, self.name, self._timestamp) + piece)

    def _write(self, data: bytes) -> None:
        if self._sink is None:
            return
        with _write_lock:
            try:
                self._sink.write(data)
                self._sink.flush()
            except BrokenPipeError:
                silence(self._sink)
                self._sink = None
                if self._on_sink_closed is not None:
                    self._on_sink_closed()
            except (OSError, ValueError):
                pass  # our own output is unusable otherwise: keep draining the rank

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

    def __init__(self, sink: BinaryIO, timestamp: bool = False, ranks: Optional[Set[int]] = None):
        self._sink = sink
        self._timestamp = timestamp
        self._ranks = ranks   # only these ranks' lines are shown (None: all)
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
        if self._ranks is not None and rank not in self._ranks:
            return
        self._write(line_prefix(rank, stream.decode(), self._timestamp) + line)

    def _write(self, data: bytes) -> None:
        with _write_lock:
            try:
                self._sink.write(data)
                self._sink.flush()
            except BrokenPipeError:
                silence(self._sink)   # our reader is gone: keep draining mpirun, quietly
            except (OSError, ValueError):
                pass


def pump_mpi_stream(pipe: BinaryIO, sink: BinaryIO, timestamp: bool = False,
                    ranks: Optional[Set[int]] = None) -> threading.Thread:
    """Reads one of mpirun's pipes on a background thread through a MpiTaggedDemux into sink."""
    demux = MpiTaggedDemux(sink, timestamp, ranks)

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


def silence(stream) -> None:
    """Points the file descriptor of stream (whose reader went away) at /dev/null, so that later writes,
    and the interpreter's flush at exit, neither fail nor print a BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def emit(message: str, verbose_only: bool = False, verbose: bool = True) -> None:
    """A launcher message on stderr, under the same lock as the ranks' lines."""
    if verbose_only and not verbose:
        return
    with _write_lock:
        try:
            sys.stderr.write(f"[pyhorovod] {message}\n")
            sys.stderr.flush()
        except BrokenPipeError:
            silence(sys.stderr)
        except (OSError, ValueError):
            pass


def indent(lines: List[str], prefix: str = "    ") -> str:
    return "".join(prefix + line if line.endswith("\n") else prefix + line + "\n" for line in lines)
