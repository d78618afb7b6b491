"""What users of `pyhorovod run` see: progress bars (carriage returns) passed through live, the console
rank filter, bad environment values refused once before any rank starts, `python -m pyhorovod`, a closed
output pipe (`| head`), independent failures told apart from echoes, and ranks started without a
preexec_fn. Every launch has a hard deadline."""
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

from runner_util import (ROOT, clean_env, kill_leftovers, launcher_argv, run_launcher, stop, wait_gone,
                         write_script)

# A progress bar's way of writing: pieces ended by "\r", the first one stamped with the time it was
# written, a pause, then more pieces and the final newline; also a "\r\n" line end.
PROGRESS = """
import sys, time
sys.stdout.write(f"first {time.time():.6f}\\r"); sys.stdout.flush()
time.sleep(2)
sys.stdout.write("second\\r"); sys.stdout.flush()
sys.stdout.write("done\\n"); sys.stdout.write("crlf\\r\\n"); sys.stdout.flush()
"""


def read_until_exit(proc, timeout):
    """(bytes read from proc.stdout, [(time.time() on arrival, chunk)]) until EOF or timeout."""
    chunks, deadline = [], time.monotonic() + timeout
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.05)[0]:
            data = os.read(fd, 65536)
            if not data:
                break
            chunks.append((time.time(), data))
    return b"".join(c for _, c in chunks), chunks


def test_carriage_returns_reach_the_console_live_with_their_prefix(tmp_path):
    script = write_script(tmp_path, "progress.py", PROGRESS)
    logs = tmp_path / "logs"
    proc = subprocess.Popen(launcher_argv(["-np", "1", "--output-filename", str(logs), "python", script]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(), cwd=ROOT,
                            start_new_session=True)
    try:
        out, chunks = read_until_exit(proc, 60)
        assert proc.wait(10) == 0, (out, proc.stderr.read())
    finally:
        stop(proc)
    m = re.fullmatch(rb"\[0\]<stdout>:first ([\d.]+)\r\[0\]<stdout>:second\r\[0\]<stdout>:done\n"
                     rb"\[0\]<stdout>:crlf\r\n", out)
    assert m, out
    written = float(m.group(1))
    arrived = next(t for t, _ in chunks if b"first" in _)
    # The rank slept 2 s after the first piece: it must not wait for the rank's next newline.
    assert arrived - written < 1.5, (arrived - written, chunks)
    assert (logs / "rank.0" / "stdout").read_bytes() == m.group(0).replace(b"[0]<stdout>:", b"")


def test_ranks_filter_limits_the_console_not_the_files(tmp_path):
    script = write_script(tmp_path, "each.py", """
        import os, sys
        r = os.environ["PYHOROVOD_RANK"]
        print(f"out {r}"); print(f"err {r}", file=sys.stderr)
    """)
    logs = tmp_path / "logs"
    r = run_launcher(["-np", "3", "--ranks-filter", "0,2", "--output-filename", str(logs), "python", script],
                     timeout=60)
    assert r.returncode == 0, r
    assert sorted(r.lines()) == ["[0]<stdout>:out 0", "[2]<stdout>:out 2"], r
    assert sorted(l for l in r.lines("stderr") if "<stderr>" in l) == ["[0]<stderr>:err 0", "[2]<stderr>:err 2"], r
    for rank in range(3):
        assert (logs / f"rank.{rank}" / "stdout").read_text() == f"out {rank}\n"
        assert (logs / f"rank.{rank}" / "stderr").read_text() == f"err {rank}\n"
    r = run_launcher(["-np", "2", "--ranks-filter", "0", "python", script], timeout=60)
    assert r.returncode == 0 and r.lines() == ["[0]<stdout>:out 0"], r

    # A filtered rank that fails is still reported, with its last lines, by the launcher.
    failing = write_script(tmp_path, "fail.py", """
        import os
        if os.environ["PYHOROVOD_RANK"] == "1":
            raise ValueError("hidden rank fails")
    """)
    r = run_launcher(["-np", "2", "--ranks-filter", "0", "python", failing], timeout=60)
    assert r.returncode == 1, r
    assert "[1]<stderr>" not in r.stderr and r.lines("stderr")[-2] == "    ValueError: hidden rank fails", r

    for bad, why in (("3", "names rank(s) [3], but the job has ranks 0 to 1"), ("0;1", "separated by commas")):
        r = run_launcher(["-np", "2", "--ranks-filter", bad, "python", script], timeout=30)
        assert r.returncode == 2 and why in r.stderr, r


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_ranks_filter_under_mpirun(tmp_path):
    script = write_script(tmp_path, "each.py", """
        import os
        print(f"out {os.environ['OMPI_COMM_WORLD_RANK']}")
    """)
    r = run_launcher(["-np", "3", "--mpi", "--ranks-filter", "1", "python", script], timeout=120)
    assert r.returncode == 0 and r.lines() == ["[1]<stdout>:out 1"], r


@pytest.mark.parametrize("name,value,message", [
    ("HOROVOD_FUSION_THRESHOLD", "abc", "environment variable HOROVOD_FUSION_THRESHOLD='abc' is not an integer"),
    ("PYHOROVOD_SHM", "maybe", "environment variable PYHOROVOD_SHM='maybe' is not a boolean (use 1/0, true/false)"),
    ("PYHOROVOD_STORE_MAX_BYTES", "0", "environment variable PYHOROVOD_STORE_MAX_BYTES='0' must be >= 1"),
    ("PYHOROVOD_KILL_GRACE_SECONDS", "soon",
     "environment variable PYHOROVOD_KILL_GRACE_SECONDS='soon' is not a number"),
])
def test_a_bad_environment_value_is_one_line_before_any_rank_starts(tmp_path, name, value, message):
    marker = tmp_path / "started"
    script = write_script(tmp_path, "mark.py", f"open({str(marker)!r}, 'a').close()\n")
    r = run_launcher(["-np", "2", "python", script], timeout=60, env={name: value})
    assert r.returncode == 2, r
    assert r.stderr == f"[pyhorovod] error: {message}\n" and r.stdout == "", r
    assert not marker.exists(), r


def test_python_m_pyhorovod_help_and_version():
    from pyhorovod import __version__

    def pyhorovod(*args):
        return subprocess.run([sys.executable, "-m", "pyhorovod", *args], capture_output=True, text=True,
                              timeout=60, env=clean_env(), cwd=ROOT)
    out = pyhorovod("--version")
    assert out.returncode == 0 and out.stdout == f"{__version__}\n", out
    out = pyhorovod("--help")
    assert out.returncode == 0, out
    for sub in ("run", "sweep", "horovodrun-alias"):   # each with a description on its line
        assert re.search(rf"^  {sub} +\S.{{20,}}$", out.stdout, re.M), out
    assert "--version" in out.stdout, out
    out = pyhorovod()
    assert out.returncode == 2 and "run" in out.stderr, out
    out = pyhorovod("run", "-np", "2", "python", "-c", "print(5)")
    assert out.returncode == 0 and sorted(out.stdout.splitlines()) == ["[0]<stdout>:5", "[1]<stdout>:5"], out


def test_a_closed_output_pipe_stops_the_ranks_quietly(tmp_path):
    script = write_script(tmp_path, "chatty.py", """
        import os, time
        print(f"pid {os.getpid()}", flush=True)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            print("x" * 100, flush=True)
            time.sleep(0.05)
    """)
    proc = subprocess.Popen(launcher_argv(["-np", "2", "--ranks-filter", "0", "--output-filename",
                                           str(tmp_path / "logs"), "python", script]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(), cwd=ROOT,
                            start_new_session=True)
    pids, logs = [], [tmp_path / "logs" / f"rank.{r}" / "stdout" for r in range(2)]
    try:
        first = proc.stdout.readline()
        deadline = time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:   # both ranks run (pids from their logs)
            pids = [int(m.group(1)) for m in (re.match(r"pid (\d+)\n", log.read_text()) if log.exists() else None
                                              for log in logs) if m]
            time.sleep(0.05)
        proc.stdout.close()                      # as `| head -1` does: one line, then the pipe is closed
        code = proc.wait(30)
        err = proc.stderr.read().decode()
        assert first.startswith(b"[0]<stdout>:pid "), first
        assert code == 128 + signal.SIGPIPE, (code, err)   # as a shell reports a writer killed by SIGPIPE
        assert "Traceback" not in err and "BrokenPipe" not in err and "job failed" not in err, err
        assert len(pids) == 2 and wait_gone(pids, 10) == [], pids
    finally:
        stop(proc)
        kill_leftovers(pids)


def test_ranks_that_fail_independently_also_failed_not_followed(tmp_path):
    # No rank calls init(); each raises an error of its own once all three run (a file per rank marks
    # that it ignores SIGTERM, so the launcher stopping the others cannot pre-empt their errors).
    script = write_script(tmp_path, "own.py", f"""
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        rank = os.environ["PYHOROVOD_RANK"]
        open(os.path.join({str(tmp_path)!r}, "up." + rank), "w").close()
        end = time.monotonic() + 30
        while len([f for f in os.listdir({str(tmp_path)!r}) if f.startswith("up.")]) < 3 and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.2 * int(rank))
        raise ValueError(f"rank {{rank}}'s own problem")
    """)
    r = run_launcher(["-np", "3", "python", script], timeout=90, env={"PYHOROVOD_KILL_GRACE_SECONDS": "10"})
    assert r.returncode == 1, r
    err = r.lines("stderr")
    blamed = int(re.search(r"job failed: rank (\d) ", err[-1]).group(1))
    assert err[-2] == f"    ValueError: rank {blamed}'s own problem", r
    others = sorted({0, 1, 2} - {blamed})
    assert f"[pyhorovod] rank(s) {others} also failed, with errors of their own" in err, r
    assert "followed from it" not in r.stderr, r


def test_ranks_are_started_without_a_preexec_fn(monkeypatch, capfd):
    # A preexec_fn runs Python between fork and exec while the output threads of earlier ranks run,
    # which CPython documents as unsafe; dying with the launcher is kept by an exec wrapper instead
    # (tests/test_launcher.py::test_ranks_die_with_a_launcher_killed_by_sigkill).
    from pyhorovod.runner import cli
    calls = []
    real = subprocess.Popen

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)
    monkeypatch.setattr(subprocess, "Popen", recording)
    for k in [k for k in os.environ if k.startswith(("PYHOROVOD_", "HOROVOD_"))]:
        monkeypatch.delenv(k)
    assert cli.run_command(["-np", "2", sys.executable, "-c", "print('ran')"]) == 0
    assert sorted(capfd.readouterr().out.splitlines()) == ["[0]<stdout>:ran", "[1]<stdout>:ran"]
    assert len(calls) == 2 and all(c.get("preexec_fn") is None and c.get("start_new_session") for c in calls), calls


def test_a_redraw_that_begins_with_a_carriage_return_gets_one_prefix(tmp_path):
    # tqdm-style bars write "\rtext": the prefix belongs after the \r, not before it as a line of its own.
    script = write_script(tmp_path, "bar.py", """
    import sys
    for i in range(3):
        sys.stderr.write(f"\\rstep {i}"); sys.stderr.flush()
    sys.stderr.write("\\n")
    """)
    r = run_launcher(["-np", "1", "python", script], timeout=60)
    assert r.returncode == 0, r
    # (run_launcher reads text with universal newlines: each \r arrives as \n.)
    assert r.stderr == "\n[0]<stderr>:step 0\n[0]<stderr>:step 1\n[0]<stderr>:step 2\n", r
