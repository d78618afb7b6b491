"""Where the job secret lives, and what a process that knows it can do.

- After init() the secret is gone from os.environ (subprocesses of the training script do not inherit
  it), yet shutdown(); init() works; a user's own PYHOROVOD_SECRET_FILE is left alone.
- `pyhorovod run --secret-file`: one 0600 file per rank, deleted by the rank once read, so a launcher
  killed by SIGKILL leaves no secret on disk once its ranks have started.
- A process with the secret that poses as a rank during init (torchrun's derived secret is computable
  by anyone who sees MASTER_ADDR:MASTER_PORT): init fails on both sides saying that two processes claim
  the rank, never "different job secret?"; a rank started twice fails the same way at the store.
- torchrun across hosts on the derived secret: rank 0 says once how to pass a real one.
"""
import logging
import os
import signal
import subprocess
import threading
import time

import pytest

import stranger
from fault_util import wait_for_files
from mp import free_port, run_ranks
from runner_util import ROOT, clean_env, kill_leftovers, launcher_argv, wait_gone, write_script
from test_security import StoreProcess, rank_env


def body_secret_env(tmp):
    import numpy as np
    import pyhorovod as hvd
    given_file = os.environ.get("PYHOROVOD_SECRET_FILE")
    seen = []
    for _ in range(2):
        hvd.init()
        child = subprocess.run(["env"], capture_output=True, text=True, timeout=30).stdout
        seen.append([name for name in ("PYHOROVOD_SECRET", "PYHOROVOD_SECRET_FILE")
                     if name in os.environ or f"{name}=" in child])
        y = hvd.allreduce(np.arange(5, dtype=np.int64) * (hvd.rank() + 1), op=hvd.Sum, name="x")
        assert y.tolist() == [0, 3, 6, 9, 12], y
        hvd.shutdown()
    return {"seen": seen, "file_kept": os.path.exists(given_file) if given_file else None}


def test_the_secret_leaves_the_environment_and_reinit_still_works(tmp_path):
    secret = os.urandom(16).hex()
    user_file = tmp_path / "my_secret"
    user_file.write_text(secret + "\n")
    store = StoreProcess(secret)
    try:
        # rank 0 gets the secret as text, rank 1 from the user's own file (which must survive).
        env = rank_env(2, store.port, secret, lambda r: {"PYHOROVOD_SECRET": None if r else secret,
                                                        "PYHOROVOD_SECRET_FILE": str(user_file) if r else None})
        results = run_ranks(body_secret_env, 2, timeout=90, args=(str(tmp_path),), launcher=None, env=env)
    finally:
        store.close()
    assert [r.value for r in results] == [{"seen": [[], []], "file_kept": None},
                                          {"seen": [[], []], "file_kept": True}], [r.value for r in results]


SECRET_FILE_RANK = """
import os, sys, time
tmp = sys.argv[1]
rank = os.environ["PYHOROVOD_RANK"]
with open(os.path.join(tmp, f"path.{rank}"), "w") as f:
    f.write(os.environ["PYHOROVOD_SECRET_FILE"])
with open(os.path.join(tmp, f"pid.{rank}"), "w") as f:
    f.write(str(os.getpid()))
import pyhorovod as hvd
hvd.init()
open(os.path.join(tmp, f"ready.{rank}"), "w").close()
time.sleep(60)
"""


def test_a_sigkilled_launcher_leaves_no_secret_file_once_the_ranks_have_read_it(tmp_path):
    tmp = str(tmp_path)
    script = write_script(tmp_path, "rank.py", SECRET_FILE_RANK)
    proc = subprocess.Popen(launcher_argv(["-np", "2", "--secret-file", "python", script, tmp]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env(), cwd=ROOT,
                            start_new_session=True)
    pids = []
    try:
        assert wait_for_files([os.path.join(tmp, f"ready.{r}") for r in range(2)], 60), "ranks never initialized"
        pids = [int(open(os.path.join(tmp, f"pid.{r}")).read()) for r in range(2)]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        paths = [open(os.path.join(tmp, f"path.{r}")).read() for r in range(2)]
        assert len(set(paths)) == 2, paths   # one file per rank
        assert wait_gone(pids, 15) == [], "the ranks outlived their SIGKILLed launcher"
        left = [p for p in paths + [os.path.dirname(paths[0])] if os.path.exists(p)]
        assert left == [], f"secret files left behind by a SIGKILLed launcher: {left}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kill_leftovers(pids)


def body_impostor_target(tmp):
    import pyhorovod as hvd
    r = int(os.environ["PYHOROVOD_RANK"])
    if r == 1:   # the real rank 1 arrives after the impostor took its place at rank 2
        assert wait_for_files([os.path.join(tmp, "impostor")], 40)
    if r == 0:   # rank 0 last: rank 2 must still be waiting for somebody when the real rank 1 comes
        assert wait_for_files([os.path.join(tmp, "done.1")], 60)
    start = time.monotonic()
    try:
        hvd.init()
        error = None
    except Exception as e:  # noqa: BLE001 -- the test checks the message
        error = f"{type(e).__name__}: {e}"
    open(os.path.join(tmp, f"done.{r}"), "w").close()
    return {"error": error, "seconds": time.monotonic() - start}


def test_a_process_posing_as_a_rank_fails_init_on_both_sides_saying_so(tmp_path):
    """Rank 2 waits for ranks 0 and 1; an impostor with the secret connects as rank 1 first; then the
    real rank 1 comes: rank 2 fails (and logs) "two connections claim to be rank 1", rank 1 fails saying
    that two processes claim its rank."""
    tmp, secret = str(tmp_path), os.urandom(16).hex()
    store = StoreProcess(secret)
    impostor = None
    try:
        from pyhorovod import _core
        client = _core.TcpStore("127.0.0.1", store.port, secret.encode(), 10.0)

        def pose_as_rank_1():
            nonlocal impostor
            host, port = bytes(client.get("phv/g0/tcp/addr/2", 60)).decode().rsplit(":", 1)
            impostor = stranger.connect(host, int(port))
            server = stranger.recv_exact(impostor, 32)
            impostor.sendall(stranger.client_hello(secret.encode(), b"phv/g0", server, stranger.ROLE_TRANSPORT,
                                                   rank=1))
            stranger.recv_exact(impostor, 32)   # rank 2 took it for rank 1
            open(os.path.join(tmp, "impostor"), "w").close()
        t = threading.Thread(target=pose_as_rank_1, daemon=True)
        t.start()
        # Rank 0 comes last, when rank 2 has failed: it gives up at the connect timeout, kept short.
        env = rank_env(3, store.port, secret, {"PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "8",
                                               "PYHOROVOD_TIMEOUT_SECONDS": "5"})
        results = run_ranks(body_impostor_target, 3, timeout=120, args=(tmp,), launcher=None, env=env)
        t.join(10)
    finally:
        if impostor:
            impostor.close()
        store.close()
    errors = [r.value["error"] for r in results]
    print(f"MEASURED impostor as rank 1: rank 1 failed {results[1].value['seconds']:.2f} s into init: "
          f"{errors[1]!r}; rank 2 (waiting for rank 0 meanwhile) after {results[2].value['seconds']:.2f} s: "
          f"{errors[2]!r}")
    assert errors[1] and "two processes claim rank 1" in errors[1] and "PYHOROVOD_SECRET" in errors[1], errors
    assert "different job secret" not in errors[1], errors
    assert errors[2] and "two connections claim to be rank 1" in errors[2], errors
    assert "two connections claim to be rank 1" in results[2].stderr, results[2].stderr   # logged too
    assert errors[0], "rank 0 initialized with a mesh that had an impostor in it"


def body_twice(tmp):
    import pyhorovod as hvd
    start = time.monotonic()
    try:
        hvd.init()
    except Exception as e:  # noqa: BLE001 -- the test checks the message
        return [f"{type(e).__name__}: {e}", time.monotonic() - start]
    hvd.shutdown()
    return None


def test_a_rank_started_twice_is_refused_at_the_store(tmp_path):
    secret = os.urandom(16).hex()
    store = StoreProcess(secret)
    try:
        # Processes 0 and 1 both say they are rank 0 of 2; process 2 is rank 1.
        env = rank_env(2, store.port, secret, lambda p: {"PYHOROVOD_RANK": str(max(0, p - 1)),
                                                        "PYHOROVOD_LOCAL_RANK": str(max(0, p - 1)),
                                                        "PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "10"})
        results = run_ranks(body_twice, 3, timeout=60, args=(str(tmp_path),), launcher=None, env=env, check=False)
    finally:
        store.close()
    twice = [r.value for r in results[:2]]
    assert sum(bool(v) and "another process has already claimed rank 0" in v[0] for v in twice) == 1, twice
    refused = next(v for v in twice if v)
    print(f"MEASURED rank 0 started twice: refused {refused[1]:.2f} s into init: {refused[0]!r}")


@pytest.mark.parametrize("local_size, warned", [("1", True), ("2", False)])
def test_torchrun_across_hosts_on_the_derived_secret_says_how_to_pass_a_real_one(caplog, local_size, warned):
    from pyhorovod import _bootstrap, _rendezvous
    from pyhorovod._config import Config
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": local_size,
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "PYHOROVOD_STORE_PORT": str(free_port())}
    caplog.set_level(logging.INFO, logger="pyhorovod")
    rdv = _rendezvous.locate(_bootstrap.discover(env), Config.from_env(env), env)
    rdv.close()
    hints = [r for r in caplog.records if "PYHOROVOD_SECRET_FILE" in r.getMessage()]
    assert len(hints) == (1 if warned else 0), [r.getMessage() for r in caplog.records]
    if warned:
        assert hints[0].levelno == logging.WARNING and "MASTER_PORT" in hints[0].getMessage()
