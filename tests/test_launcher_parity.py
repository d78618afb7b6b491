"""horovodrun's command line under `pyhorovod run`: every Horovod flag is honoured (exported as the
variable the ranks read), noted as having no effect, or refused (jsrun); Horovod's short forms,
--config-file, timestamps; and the programmatic `pyhorovod.run(func, ...)`. Every launch has a deadline."""
import json
import re
import shutil
import subprocess
import sys

import pytest

from runner_util import ROOT, clean_env, run_launcher, write_script

# Prints the HOROVOD_ variables a rank got (rank coordinates aside), after init(), so that a warning of
# rank 0 about inert variables would show up on its stderr.
SHOW_ENV = """
import json, os
import pyhorovod as hvd
hvd.init()
coords = {"RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "HOSTNAME"}
print(json.dumps({k: v for k, v in sorted(os.environ.items())
                  if k.startswith("HOROVOD_") and k[len("HOROVOD_"):] not in coords}))
"""


def rank_env(result, rank=0):
    lines = [line for line in result.lines() if line.startswith(f"[{rank}]<stdout>:{{")]
    assert len(lines) == 1, result
    return json.loads(lines[0].split(":", 1)[1])


def notes(result):
    return sorted(re.findall(r"^\[pyhorovod\] (--\S+) has no effect", result.stderr, re.M))


def test_version_and_check_build_short_forms():
    from pyhorovod import __version__
    r = run_launcher(["-v"], timeout=30)
    assert r.returncode == 0 and r.stdout == f"{__version__}\n", r
    r = run_launcher(["--version"], timeout=30)
    assert r.returncode == 0 and r.stdout == f"{__version__}\n", r
    r = run_launcher(["-cb"], timeout=30)
    assert r.returncode == 0, r
    for part in ("Available frameworks:", "[X] PyTorch", "Available controllers", "Available tensor operations:",
                 "[X] TCP ring", "[ ] Gloo"):
        assert part in r.stdout, (part, r)


def test_every_horovod_flag_is_honoured_or_said_to_have_no_effect(tmp_path):
    script = write_script(tmp_path, "show.py", SHOW_ENV)
    honoured = ["--fusion-threshold-mb", "2", "--cycle-time-ms", "3", "--cache-capacity", "8",
                "--timeline-filename", "tl.json", "--timeline-mark-cycles", "--stall-check",
                "--stall-check-warning-time-seconds", "9", "--stall-check-shutdown-time-seconds", "20",
                "--gloo-timeout-seconds", "40", "--log-level", "info", "--network-interface", "lo",
                "--output-filename", "logs", "--verbose", "--gloo", "-p", "22", "--start-timeout", "60"]
    inert = ["--hierarchical-allreduce", "--no-hierarchical-allgather", "--autotune", "--autotune-log-file",
             "at.csv", "--autotune-warmup-samples", "3", "--autotune-steps-per-sample", "10",
             "--autotune-bayes-opt-max-samples", "20", "--autotune-gaussian-process-noise", "0.8",
             "--mpi-threads-disable", "--num-nccl-streams", "2", "--thread-affinity", "1", "--ccl-bgt-affinity",
             "0", "--log-with-timestamp", "--disable-cache", "--tcp", "--binding-args", "--bind-to core"]
    r = run_launcher(["-np", "2", *honoured, *inert, "python", script], timeout=90, cwd=str(tmp_path))
    assert r.returncode == 0, r
    want = {"HOROVOD_FUSION_THRESHOLD": "2097152", "HOROVOD_CYCLE_TIME": "3", "HOROVOD_CACHE_CAPACITY": "8",
            "HOROVOD_TIMELINE": f"{tmp_path}/tl.json", "HOROVOD_TIMELINE_MARK_CYCLES": "1",
            "HOROVOD_STALL_CHECK_DISABLE": "0", "HOROVOD_STALL_CHECK_TIME_SECONDS": "9",
            "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "20", "HOROVOD_GLOO_TIMEOUT_SECONDS": "40",
            "HOROVOD_LOG_LEVEL": "INFO", "HOROVOD_GLOO_IFACE": "lo"}
    assert rank_env(r, 0) == want and rank_env(r, 1) == want, r
    assert notes(r) == sorted(["--hierarchical-allreduce", "--hierarchical-allgather", "--autotune",
                               "--autotune-log-file", "--autotune-warmup-samples", "--autotune-steps-per-sample",
                               "--autotune-bayes-opt-max-samples", "--autotune-gaussian-process-noise",
                               "--mpi-threads-disable", "--num-nccl-streams", "--thread-affinity",
                               "--ccl-bgt-affinity", "--log-with(out)-timestamp", "--disable-cache", "--tcp",
                               "--binding-args"]), r
    assert "autotuner" in r.stderr and "without --mpi" in r.stderr, r
    # Inert flags export nothing, so rank 0 has nothing more to report at init().
    assert not [line for line in r.lines("stderr") if "<stderr>" in line and "no effect" in line], r
    assert (tmp_path / "logs" / "rank.1" / "stdout").exists()


def test_stall_check_flags_and_whole_names_only(tmp_path):
    script = write_script(tmp_path, "show.py", SHOW_ENV)
    r = run_launcher(["-np", "1", "--stall-check", "python", script], timeout=60)
    assert r.returncode == 0 and rank_env(r)["HOROVOD_STALL_CHECK_DISABLE"] == "0", r
    r = run_launcher(["-np", "1", "--no-stall-check", "python", script], timeout=60)
    assert r.returncode == 0 and rank_env(r)["HOROVOD_STALL_CHECK_DISABLE"] == "1", r
    r = run_launcher(["-np", "1", "--stall-check", "--no-stall-check", "python", script], timeout=60)
    assert r.returncode == 2 and "not allowed with argument" in r.stderr, r
    r = run_launcher(["-np", "1", "--fusion-thresh", "2", "python", script], timeout=60)
    assert r.returncode == 2 and "unrecognized arguments: --fusion-thresh" in r.stderr, r


def test_single_dash_hostfile_and_timestamped_output(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n")
    r = run_launcher(["-hostfile", str(hostfile), "-prefix-timestamp", "python", "-c", "print('hi')"], timeout=60)
    assert r.returncode == 0, r
    stamp = r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}"   # time.asctime()
    assert len(r.lines()) == 2 and all(re.fullmatch(stamp + r"\[[01]\]<stdout>:hi", line) for line in r.lines()), r
    r = run_launcher(["-np", "1", "--prefix-output-with-timestamp", "python", "-c", "print('x')"], timeout=60)
    assert r.returncode == 0 and re.fullmatch(stamp + r"\[0\]<stdout>:x\n", r.stdout), r


def test_jsrun_and_two_controllers_are_refused():
    r = run_launcher(["-np", "1", "--jsrun", "python", "-c", "pass"], timeout=30)
    assert r.returncode == 2 and "--jsrun is not supported" in r.stderr, r
    r = run_launcher(["-np", "1", "--gloo", "--mpi", "python", "-c", "pass"], timeout=30)
    assert r.returncode == 2 and "not allowed with argument" in r.stderr, r


def test_binding_args_replace_mpiruns_default_binding():
    from pyhorovod.runner.mpi import mpirun_argv
    argv = mpirun_argv(2, None, [], ["python", "t.py"], binding_args="--bind-to core --map-by socket")
    assert argv[:7] == ["mpirun", "-np", "2", "--bind-to", "core", "--map-by", "socket"], argv
    assert "none" not in argv


CONFIG = """
params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
timeline:
  filename: t.json
  mark_cycles: true
stall_check:
  enabled: false
  warning_time_seconds: 30
library_options:
  gloo_timeout_seconds: 45
  num_nccl_streams: 2
logging:
  level: debug
"""


def test_config_file_sets_the_flags_and_the_command_line_wins(tmp_path):
    pytest.importorskip("yaml", reason="--config-file needs PyYAML")
    script = write_script(tmp_path, "show.py", SHOW_ENV)
    config = write_script(tmp_path, "hvd.yaml", CONFIG)
    r = run_launcher(["-np", "1", "--config-file", config, "--cycle-time-ms", "5", "python", script],
                     timeout=60, cwd=str(tmp_path))
    assert r.returncode == 0, r
    assert rank_env(r) == {
        "HOROVOD_FUSION_THRESHOLD": str(32 << 20), "HOROVOD_CYCLE_TIME": "5", "HOROVOD_CACHE_CAPACITY": "2048",
        "HOROVOD_TIMELINE": f"{tmp_path}/t.json", "HOROVOD_TIMELINE_MARK_CYCLES": "1",
        "HOROVOD_STALL_CHECK_DISABLE": "1", "HOROVOD_STALL_CHECK_TIME_SECONDS": "30",
        "HOROVOD_GLOO_TIMEOUT_SECONDS": "45", "HOROVOD_LOG_LEVEL": "DEBUG"}, r
    assert notes(r) == ["--hierarchical-allreduce", "--num-nccl-streams"], r
    for text, message in (("params:\n  fusion_treshold_mb: 3\n", "unknown key params.fusion_treshold_mb"),
                          ("tuning:\n  a: 1\n", "unknown section 'tuning'"),
                          ("params:\n  cycle_time_ms: fast\n", "params.cycle_time_ms must be int or float"),
                          ("params:\n  cache_capacity: true\n", "params.cache_capacity must be int"),
                          ("logging:\n  level: loud\n", "logging.level 'LOUD' is not one of"),
                          ("params: [1\n", "not valid YAML")):
        bad = write_script(tmp_path, "bad.yaml", text)
        r = run_launcher(["-np", "1", "--config-file", bad, "python", "-c", "pass"], timeout=30)
        assert r.returncode == 2 and message in r.stderr, (message, r)
    r = run_launcher(["-np", "1", "--config-file", str(tmp_path / "none.yaml"), "python", "-c", "pass"], timeout=30)
    assert r.returncode == 2 and "No such file" in r.stderr, r


# ------------------------------------------------------------------ pyhorovod.run(func, ...)

PROGRAM = """
import json, sys
import numpy as np
import pyhorovod

def rank_sum(scale, offset=0):
    import pyhorovod as hvd      # runs in an initialized job
    total = hvd.allreduce(np.array([hvd.rank() * scale], np.float64), op=hvd.Sum)
    return {"rank": hvd.rank(), "size": hvd.size(), "total": float(total[0]) + offset}

mode = sys.argv[1]
if mode == "results":
    print(json.dumps(pyhorovod.run(rank_sum, args=(2.0,), kwargs={"offset": 1}, np=3)))
    big = bytes(range(256)) * 4096   # 1 MiB each way
    print(json.dumps(pyhorovod.run(lambda b: len(b) + pyhorovod.rank(), args=(big,), np=2)))
elif mode == "raises":
    def fail_on_one():
        import pyhorovod as hvd
        if hvd.rank() == 1:
            raise KeyError("missing on rank one")
        return hvd.rank()
    try:
        pyhorovod.run(fail_on_one, np=2)
    except RuntimeError as e:
        print(json.dumps(str(e)))
elif mode == "module":
    import pyhorovod.run                       # the module, imported explicitly: still callable
    from pyhorovod import run
    print(json.dumps([pyhorovod.run is run, run(len, args=("abc",), np=1)]))
elif mode == "mpi":
    print(json.dumps(pyhorovod.run(rank_sum, args=(1.0,), np=2, use_mpi=True)))
elif mode == "elastic":
    def elastic_sum():
        import pyhorovod as hvd
        state = hvd.elastic.ObjectState(step=0)

        @hvd.elastic.run
        def train(state):
            while state.step < 3:
                state.step += 1
                state.commit()
            return rank_sum(1.0)
        return train(state)
    print(json.dumps(pyhorovod.run(elastic_sum, np=2, min_np=1, max_np=2, reset_limit=2)))
elif mode == "bad":
    for kwargs in ({"np": 0}, {"np": 2, "min_np": 3}):
        try:
            pyhorovod.run(len, args=("x",), **kwargs)
        except ValueError as e:
            print(json.dumps(str(e)))
"""


def run_program(tmp_path, mode, timeout=120):
    program = write_script(tmp_path, "prog.py", PROGRAM)
    out = subprocess.run([sys.executable, program, mode], capture_output=True, text=True, timeout=timeout,
                         env=clean_env(), cwd=ROOT)
    return out, [json.loads(line) for line in out.stdout.splitlines()]


def test_run_function_returns_each_ranks_result_in_rank_order(tmp_path):
    pytest.importorskip("cloudpickle", reason="functions of __main__ and lambdas need cloudpickle")
    out, got = run_program(tmp_path, "results")
    assert out.returncode == 0, out
    assert got[0] == [{"rank": r, "size": 3, "total": 7.0} for r in range(3)], out
    assert got[1] == [1 << 20, (1 << 20) + 1], out


def test_run_function_failure_names_the_rank_and_its_error(tmp_path):
    pytest.importorskip("cloudpickle", reason="functions of __main__ need cloudpickle")
    out, got = run_program(tmp_path, "raises")
    assert out.returncode == 0 and len(got) == 1, out
    assert got[0].startswith("pyhorovod.run: rank 1 raised:\nTraceback") and "KeyError: 'missing on rank one'" \
        in got[0], out


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_run_function_through_mpirun(tmp_path):
    pytest.importorskip("cloudpickle", reason="functions of __main__ need cloudpickle")
    out, got = run_program(tmp_path, "mpi")
    assert out.returncode == 0 and got == [[{"rank": r, "size": 2, "total": 1.0} for r in range(2)]], out


def test_run_is_a_callable_module_and_checks_its_arguments(tmp_path):
    out, got = run_program(tmp_path, "module")
    assert out.returncode == 0 and got == [[True, [3]]], out
    out, got = run_program(tmp_path, "bad")
    assert out.returncode == 0, out
    assert got == ["pyhorovod.run: np must be a positive int, got 0",
                   "pyhorovod.run: np=2 must lie within min_np=3 .. max_np=3 (min_np >= 1)"], out


def test_run_function_elastic(tmp_path):
    pytest.importorskip("cloudpickle", reason="functions of __main__ need cloudpickle")
    out, got = run_program(tmp_path, "elastic")
    assert out.returncode == 0 and got == [[{"rank": r, "size": 2, "total": 1.0} for r in range(2)]], out
