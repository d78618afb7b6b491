"""`pyhorovod run --mpi` output: mpirun's `--tag-output` tags every write a rank makes, not every line, so
the launcher reassembles each rank's lines (pyhorovod/runner/output.py MpiTaggedDemux). Pure parsing, no
processes; the end-to-end run is tests/test_environments.py::test_pyhorovod_run_mpi_delegates_to_mpirun."""
import io

import pytest

from pyhorovod.runner.output import MpiTaggedDemux

# What Open MPI 4.1 wrote for three ranks printing one JSON line each with an unbuffered stdout (print()
# writes the text and the newline separately), interleaved; then mpirun's own untagged message.
STREAM = (b"[1,0]<stdout>:RESULT [0, 6][1,1]<stdout>:RESULT [1, 6][1,0]<stdout>:\n"
          b"[1,2]<stdout>:RESULT [2, 6][1,1]<stdout>:\n[1,2]<stdout>:\n"
          b"[1,1]<stderr>:  File x[1,1]<stderr>:^[1,1]<stderr>:^^\n"
          b"mpirun noticed something\n")
LINES = ["[0]<stdout>:RESULT [0, 6]", "[1]<stdout>:RESULT [1, 6]", "[2]<stdout>:RESULT [2, 6]",
         "[1]<stderr>:  File x^^^", "mpirun noticed something"]


def demux(chunks):
    sink = io.BytesIO()
    d = MpiTaggedDemux(sink)
    for c in chunks:
        d.feed(c)
    d.close()
    return sink.getvalue().decode().splitlines()


def test_fragments_become_whole_lines_per_rank():
    assert demux([STREAM]) == LINES


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7, 13])
def test_any_split_of_the_stream_gives_the_same_lines(step):
    # Pipe reads cut anywhere, also inside a tag.
    assert demux([STREAM[i:i + step] for i in range(0, len(STREAM), step)]) == LINES


def test_unfinished_lines_are_flushed_at_the_end():
    assert demux([b"[1,3]<stdout>:no newline", b"[1,0]<stderr>:half"]) == ["[0]<stderr>:half",
                                                                            "[3]<stdout>:no newline"]
    assert demux([b"[1,0]<stdout>:a\n[1,0]<std"]) == ["[0]<stdout>:a", "[1,0]<std"]
    assert demux([]) == []


def test_stddiag_is_stderr_and_blank_lines_survive():
    assert demux([b"[1,4]<stddiag>:warn\n[1,4]<stdout>:\n[1,4]<stdout>:x\n"]) == \
        ["[4]<stderr>:warn", "[4]<stdout>:", "[4]<stdout>:x"]
