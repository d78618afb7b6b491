"""`pyhorovod run` end to end: exit codes and fail-fast, rank-prefixed output and log files, restarts,
the secret's path, Ctrl-C, remote ranks through a stand-in for ssh. Every launch has a hard deadline."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from runner_util import (ROOT, clean_env, kill_leftovers, launcher_argv, run_launcher, stop, wait_gone,
                         write_script)

# A rank script driven by argv: MODE TARGET_RANK. Prints its pid first, so the test can check that the
# launcher really stopped it. Ranks other than the target sleep (bounded) until stopped.
RANK = """
import os, signal, sys, time
rank = int(os.environ["PYHOROVOD_RANK"]); restart = int(os.environ["PYHOROVOD_RESTART_COUNT"])
mode, target = sys.argv[1], int(sys.argv[2])
print(f"pid {os.getpid()} rank {rank} restart {restart}", flush=True)
if mode == "stubborn" and rank == target:
    signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)
if rank == target and mode in ("raise", "sigkill"):
    time.sleep(0.5)
    if mode == "raise":
        raise ValueError(f"boom on rank {rank}")
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "fail-once" and rank == target and restart == 0:
    time.sleep(0.3)
    sys.exit(3)
if mode in ("fail-once", "ok"):
    print(f"rank {rank} finished", flush=True)
    sys.exit(0)
time.sleep(40)
"""

# Stands in for ssh: `AGENT HOST COMMAND` runs COMMAND with sh on this machine.
FAKE_SSH = "sh -c 'exec sh -c \"$2\"' fake-ssh"


def pids_of(text):
    return [int(p) for p in re.findall(r"<stdout>:pid (\d+)", text)]


@pytest.fixture
def rank_script(tmp_path):
    return write_script(tmp_path, "rank.py", RANK)


def test_success_prefixed_output_and_rank_variables(tmp_path):
    script = write_script(tmp_path, "hello.py", """
        import os, sys
        e = os.environ
        print("rank {PYHOROVOD_RANK} of {PYHOROVOD_SIZE} local {PYHOROVOD_LOCAL_RANK}/{PYHOROVOD_LOCAL_SIZE} "
              "cross {PYHOROVOD_CROSS_RANK}/{PYHOROVOD_CROSS_SIZE} horovod {HOROVOD_RANK}/{HOROVOD_SIZE} "
              "store {PYHOROVOD_STORE_ADDR} restart {PYHOROVOD_RESTART_COUNT}".format(**e))
        print(f"secret {len(e['PYHOROVOD_SECRET'])} port {int(e['PYHOROVOD_STORE_PORT']) > 0}")
        print(f"to stderr {e['PYHOROVOD_RANK']}", file=sys.stderr)
        print("no newline at the end", end="")
    """)
    r = run_launcher(["-np", "3", "python", script], timeout=60)
    assert r.returncode == 0, r
    for rank in range(3):
        assert (f"[{rank}]<stdout>:rank {rank} of 3 local {rank}/3 cross 0/1 horovod {rank}/3 "
                f"store 127.0.0.1 restart 0") in r.lines(), r
        assert f"[{rank}]<stdout>:secret 64 port True" in r.lines(), r
        assert f"[{rank}]<stdout>:no newline at the end" in r.lines(), r
        assert f"[{rank}]<stderr>:to stderr {rank}" in r.lines("stderr"), r
    assert len(r.lines()) == 9, r


def test_per_rank_log_files(tmp_path):
    script = write_script(tmp_path, "log.py", """
        import os, sys
        r = os.environ["PYHOROVOD_RANK"]
        print(f"out {r} line 1"); print(f"out {r} line 2"); print(f"err {r}", file=sys.stderr)
    """)
    logs = tmp_path / "logs"
    r = run_launcher(["-np", "2", "--output-filename", str(logs), "python", script], timeout=60)
    assert r.returncode == 0, r
    for rank in range(2):
        assert (logs / f"rank.{rank}" / "stdout").read_text() == f"out {rank} line 1\nout {rank} line 2\n"
        assert (logs / f"rank.{rank}" / "stderr").read_text() == f"err {rank}\n"
    assert "[1]<stdout>:out 1 line 2" in r.lines(), r   # still shown on the terminal too


def test_rank_that_raises_stops_the_others_and_is_reported_last(rank_script):
    r = run_launcher(["-np", "3", "--start-timeout", "60", "python", rank_script, "raise", "1"], timeout=60)
    pids = pids_of(r.stdout)
    try:
        assert r.returncode == 1, r
        assert len(pids) == 3, r
        assert r.elapsed < 35, r          # the others sleep 40 s: they were stopped
        assert wait_gone(pids, 5) == [], r
        err = r.lines("stderr")
        assert re.fullmatch(r"\[pyhorovod\] job failed: rank 1 \(host localhost, pid \d+\) exited with code 1",
                            err[-1]), r
        assert err[-2] == "    ValueError: boom on rank 1", r        # the traceback, repeated last
        assert "[1]<stderr>:ValueError: boom on rank 1" in err, r
        assert any(re.match(r"\[pyhorovod\] rank 1 .* exited with code 1; stopping ranks \[0, 2\]", l)
                   for l in err), r
    finally:
        kill_leftovers(pids)


def test_rank_killed_by_signal(rank_script):
    r = run_launcher(["-np", "3", "--start-timeout", "60", "python", rank_script, "sigkill", "2"], timeout=60)
    pids = pids_of(r.stdout)
    try:
        assert r.returncode == 128 + 9, r
        assert r.elapsed < 35, r
        assert wait_gone(pids, 5) == [], r
        assert re.search(r"job failed: rank 2 \(host localhost, pid \d+\) was killed by SIGKILL \(signal 9\)",
                         r.stderr), r
    finally:
        kill_leftovers(pids)


def test_rank_hanging_before_rendezvous_hits_start_timeout(tmp_path):
    # Rank 0 enters the real rendezvous (init waits for rank 1); rank 1 never gets there.
    script = write_script(tmp_path, "late.py", """
        import os, time
        print(f"pid {os.getpid()}", flush=True)
        if os.environ["PYHOROVOD_RANK"] == "1":
            time.sleep(40)
        import pyhorovod
        pyhorovod.init()
    """)
    r = run_launcher(["-np", "2", "--start-timeout", "4", "python", script], timeout=60,
                     env={"PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "50"})
    pids = pids_of(r.stdout)
    try:
        assert r.returncode == 124, r
        assert 4 <= r.elapsed < 25, r
        assert wait_gone(pids, 5) == [], r
        assert re.search(r"job failed: rank\(s\) 1 \(localhost\) did not reach rendezvous within "
                         r"--start-timeout 4 s of the launch$", r.stderr.strip()), r
    finally:
        kill_leftovers(pids)


def test_restart_after_failure_exports_restart_count(rank_script):
    r = run_launcher(["-np", "2", "--max-restarts", "2", "--start-timeout", "60",
                      "python", rank_script, "fail-once", "1"], timeout=60)
    assert r.returncode == 0, r
    for rank in range(2):
        assert re.search(rf"\[{rank}\]<stdout>:pid \d+ rank {rank} restart 0", r.stdout), r
        assert re.search(rf"\[{rank}\]<stdout>:pid \d+ rank {rank} restart 1", r.stdout), r
        assert f"[{rank}]<stdout>:rank {rank} finished" in r.lines(), r
    assert "restart 2" not in r.stdout, r
    assert re.search(r"restarting the job \(restart 1 of 2\) after: rank 1 .* exited with code 3", r.stderr), r


def test_restarts_give_up(rank_script):
    r = run_launcher(["-np", "2", "--max-restarts", "1", "--start-timeout", "60",
                      "python", rank_script, "raise", "0"], timeout=60)
    pids = pids_of(r.stdout)
    kill_leftovers(pids)
    assert r.returncode == 1, r
    assert len(pids) == 4, r  # two attempts of two ranks
    assert "giving up after 1 restart(s)" in r.stderr, r


SECRET_PROBE = """
import os, stat
e = os.environ
secret = e.get("PYHOROVOD_SECRET")
if secret is None:
    path = e["PYHOROVOD_SECRET_FILE"]
    mode = stat.S_IMODE(os.stat(path).st_mode); dmode = stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)
    secret = open(path).read()
    print(f"file mode {mode:o} dir {dmode:o}")
hits = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        hits += secret.encode() in open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        pass
print(f"rank {e['PYHOROVOD_RANK']} host {e['PYHOROVOD_HOSTNAME']} len {len(secret)} cmdlines-with-secret {hits}")
"""


@pytest.mark.parametrize("mode", ["env", "file", "remote"])
def test_secret_never_on_a_command_line(tmp_path, mode):
    script = write_script(tmp_path, "secret.py", SECRET_PROBE)
    args = ["-np", "2"]
    if mode == "file":
        args.append("--secret-file")
    if mode == "remote":
        args += ["-H", "localhost:1,fake-remote-host:1", "--network-interfaces", "lo", "--rsh-agent", FAKE_SSH]
    r = run_launcher(args + ["python", script], timeout=60)
    assert r.returncode == 0, r
    hosts = ["localhost", "fake-remote-host"] if mode == "remote" else ["localhost", "localhost"]
    for rank in range(2):
        assert f"[{rank}]<stdout>:rank {rank} host {hosts[rank]} len 64 cmdlines-with-secret 0" in r.lines(), r
        if mode == "file":
            assert f"[{rank}]<stdout>:file mode 600 dir 700" in r.lines(), r


def test_remote_ranks_get_rank_variables_and_fail_fast(rank_script):
    # Ranks 1 and 2 are "remote" (started through the agent and the remote wrapper); rank 0 fails.
    r = run_launcher(["-np", "3", "-H", "localhost:1,fake-remote-host:2", "--network-interfaces", "lo",
                      "--rsh-agent", FAKE_SSH, "--start-timeout", "60", "python", rank_script, "raise", "0"],
                     timeout=60)
    pids = pids_of(r.stdout)
    try:
        assert r.returncode == 1, r
        assert len(pids) == 3 and r.elapsed < 35, r
        assert wait_gone(pids, 5) == [], r
        assert "job failed: rank 0 (host localhost" in r.stderr, r
    finally:
        kill_leftovers(pids)


def test_ctrl_c_stops_every_rank(rank_script):
    # Rank 1 ignores SIGINT and SIGTERM: the launcher must escalate to SIGKILL after the grace period.
    argv = launcher_argv(["-np", "3", "--start-timeout", "60", "python", rank_script, "stubborn", "1"])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=clean_env({"PYHOROVOD_KILL_GRACE_SECONDS": "1"}), start_new_session=True)
    lines, pids = [], []
    try:
        deadline = time.monotonic() + 30
        while len(pids) < 3 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            pids = pids_of("".join(lines))
        assert len(pids) == 3, "".join(lines)
        time.sleep(0.3)  # let rank 1 install its handlers
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 130, err
        assert time.monotonic() - start < 15, err
        assert wait_gone(pids, 5) == [], err
        assert "received SIGINT: stopping all ranks" in err
        assert "job failed: interrupted by SIGINT" in err
    finally:
        stop(proc)
        kill_leftovers(pids)


def test_ranks_die_with_a_launcher_killed_by_sigkill(rank_script):
    # The launcher cannot clean up after SIGKILL: the kernel (local rank) and the remote wrapper (rank 1,
    # started through the stand-in ssh, which sees its stdin close) must stop the ranks.
    argv = launcher_argv(["-np", "2", "-H", "localhost:1,fake-remote-host:1", "--network-interfaces", "lo",
                          "--rsh-agent", FAKE_SSH, "--start-timeout", "60", "python", rank_script, "sleep", "-1"])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=clean_env(), start_new_session=True)
    lines, pids = [], []
    try:
        deadline = time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            pids = pids_of("".join(lines))
        assert len(pids) == 2, "".join(lines)
        proc.kill()
        proc.wait(10)
        assert wait_gone(pids, 10) == [], "".join(lines)
    finally:
        stop(proc)
        kill_leftovers(pids)


def test_launch_errors_are_clear(tmp_path):
    r = run_launcher(["-np", "3", "-H", "localhost:2", "python", "-c", "pass"], timeout=30)
    assert r.returncode == 2 and "-np 3 needs 3 slots but the hosts offer only 2 (localhost:2)" in r.stderr, r
    r = run_launcher(["-np", "1", "/nonexistent/program"], timeout=30)
    assert r.returncode == 127 and "cannot start rank 0 ('/nonexistent/program')" in r.stderr, r
    r = run_launcher(["-np", "1", "--network-interfaces", "nosuchif0", "python", "-c", "pass"], timeout=30)
    assert r.returncode == 2 and "network interface 'nosuchif0' does not exist" in r.stderr, r
    r = run_launcher(["python", "-c", "pass"], timeout=30)
    assert r.returncode == 2 and "-np is required" in r.stderr, r


def test_tuning_flags_become_horovod_variables(tmp_path):
    script = write_script(tmp_path, "knobs.py", """
        import os
        names = ["HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY", "HOROVOD_TIMELINE",
                 "HOROVOD_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_TIME_SECONDS",
                 "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_LOG_LEVEL", "HOROVOD_GLOO_IFACE", "PYHOROVOD_IFACE"]
        print(" ".join(f"{n}={os.environ.get(n)}" for n in names))
    """)
    r = run_launcher(["-np", "1", "--fusion-threshold-mb", "2", "--cycle-time-ms", "0.5", "--cache-capacity", "7",
                      "--timeline-filename", "tl.json", "--no-stall-check", "--stall-check-warning-time-seconds",
                      "9", "--stall-check-shutdown-time-seconds", "20", "--log-level", "debug",
                      "--network-interfaces", "lo", "python", script], timeout=60, cwd=str(tmp_path))
    assert r.returncode == 0, r
    assert r.lines() == [
        f"[0]<stdout>:HOROVOD_FUSION_THRESHOLD=2097152 HOROVOD_CYCLE_TIME=0.5 HOROVOD_CACHE_CAPACITY=7 "
        f"HOROVOD_TIMELINE={tmp_path}/tl.json HOROVOD_STALL_CHECK_DISABLE=1 HOROVOD_STALL_CHECK_TIME_SECONDS=9 "
        f"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=20 HOROVOD_LOG_LEVEL=DEBUG HOROVOD_GLOO_IFACE=lo PYHOROVOD_IFACE=lo"], r


def test_check_build_and_entry_points():
    r = run_launcher(["--check-build"], timeout=60)
    assert r.returncode == 0, r
    assert "[X] TCP ring" in r.stdout and "version:" in r.stdout, r
    # `pyhorovod run` (the console script's main) and `pyhorovod sweep` routing
    out = subprocess.run([sys.executable, "-c", "import sys; from pyhorovod.runner.cli import main; "
                          "sys.exit(main(['run', '-np', '2', 'python', '-c', 'print(7)']))"],
                         capture_output=True, text=True, timeout=60, env=clean_env(), cwd=ROOT)
    assert out.returncode == 0 and sorted(out.stdout.splitlines()) == ["[0]<stdout>:7", "[1]<stdout>:7"], out
    out = subprocess.run([sys.executable, "-c", "import sys; from pyhorovod.runner.cli import horovodrun_main; "
                          "sys.exit(horovodrun_main(['-np', '1', 'python', '-c', 'print(8)']))"],
                         capture_output=True, text=True, timeout=60, env=clean_env(), cwd=ROOT)
    assert out.returncode == 0 and out.stdout.splitlines() == ["[0]<stdout>:8"], out
    out = subprocess.run([sys.executable, "-c", "import sys; from pyhorovod.runner.cli import main; "
                          "sys.exit(main(['bogus']))"], capture_output=True, text=True, timeout=60,
                         env=clean_env(), cwd=ROOT)
    assert out.returncode == 2 and "unknown subcommand 'bogus'" in out.stderr, out


def test_restart_example_resumes_from_checkpoint(tmp_path):
    example = os.path.join(ROOT, "examples", "restart_checkpoint.py")
    ckpt_a, ckpt_b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    crashed = run_launcher(["-np", "2", "--max-restarts", "1", "python", example, "--checkpoint", ckpt_a,
                            "--fail-at-step", "25"], timeout=120)
    assert crashed.returncode == 0, crashed
    assert "[0]<stdout>:restart 0: starting at step 0" in crashed.lines(), crashed
    assert "[0]<stdout>:restart 1: starting at step 20" in crashed.lines(), crashed
    assert "[1]<stderr>:RuntimeError: simulated crash of rank 1 at step 25" in crashed.lines("stderr"), crashed
    clean = run_launcher(["-np", "2", "python", example, "--checkpoint", ckpt_b], timeout=120)
    assert clean.returncode == 0, clean
    final = [l for l in crashed.lines() if "<stdout>:done:" in l]
    assert len(final) == 1 and final == [l for l in clean.lines() if "<stdout>:done:" in l], (crashed, clean)


def _run_in_process(command, timeout_s, strict, size=2, hostnames=("localhost",)):
    """run_job with a short start timeout; both rules are only reachable this way (the CLI default is 30 s)."""
    from pyhorovod.runner import hosts, launch
    slots = hosts.assign_slots([hosts.HostSpec(h, size // len(hostnames)) for h in hostnames], size)
    opts = launch.LaunchOptions(command=command, slots=slots, local_hosts=list(hostnames), bind_host="127.0.0.1",
                                start_timeout_s=timeout_s, start_timeout_strict=strict, kill_grace_s=1.0)
    start = time.monotonic()
    return launch.run_job(opts), time.monotonic() - start


@pytest.mark.parametrize("hostnames", [("localhost",), ("localhost", "127.0.0.1")])
def test_default_start_timeout_counts_from_the_first_arrival(tmp_path, capfd, monkeypatch, hostnames):
    # Rank 0 arrives at once and waits in init; rank 1 takes 40 s: stopped 3 s after rank 0's arrival.
    # (One host: the mesh address key marks arrival; two host names: the topology exchange key does.)
    script = write_script(tmp_path, "late.py", """
        import os, time
        if os.environ["PYHOROVOD_RANK"] == "1":
            time.sleep(40)
        import pyhorovod
        pyhorovod.init()
    """)
    for name, value in clean_env({"PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "50"}).items():
        monkeypatch.setenv(name, value)
    code, elapsed = _run_in_process([sys.executable, script], 3.0, strict=False, hostnames=hostnames)
    err = capfd.readouterr().err
    assert code == 124 and 3 <= elapsed < 20, err
    assert "rank(s) 1 (" in err and "within --start-timeout 3 s of the first rank's arrival" in err, err


def test_default_start_timeout_spares_ranks_that_never_call_init(tmp_path, capfd):
    # The rank outlives the 1 s start timeout 2.5 times over without ever reaching rendezvous.
    code, elapsed = _run_in_process([sys.executable, "-c", "import time; time.sleep(2.5)"], 1.0, strict=False)
    assert code == 0 and elapsed >= 2.5, capfd.readouterr()
