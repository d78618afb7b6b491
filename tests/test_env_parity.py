"""Horovod's environment variables under pyhorovod: those without effect are named once by rank 0 at
init() (pyhorovod/_inert_env.py), the cheap ones are honoured, and the collective deadline's default is
long (30 minutes) while a dead peer is still noticed at once."""
import os
import signal
import time

import numpy as np
import pytest

from fault_util import read_stamp, stamp
from mp import run_ranks
from pyhorovod import _inert_env
from pyhorovod._config import Config

# Variables Horovod 0.28 reads that pyhorovod honours (pyhorovod/_config.py, _bootstrap.py, the launcher):
# none of them may be reported as having no effect.
HONOURED = ["HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY", "HOROVOD_TIMELINE",
            "HOROVOD_TIMELINE_MARK_CYCLES", "HOROVOD_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_TIME_SECONDS",
            "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_LOG_LEVEL", "HOROVOD_DYNAMIC_PROCESS_SETS",
            "HOROVOD_GLOO_IFACE", "HOROVOD_GLOO_TIMEOUT_SECONDS", "HOROVOD_HOSTNAME", "HOROVOD_RANK",
            "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
            "HOROVOD_CROSS_SIZE", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT",
            "HOROVOD_START_TIMEOUT", "HOROVOD_AUTOTUNE", "HOROVOD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES",
            "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
            "HOROVOD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLGATHER"]

# The ones the issue names as silently ignored before, each of which must now be reported.
FORMERLY_SILENT = ["HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "HOROVOD_THREAD_AFFINITY", "HOROVOD_CONTROLLER",
                   "HOROVOD_CPU_OPERATIONS", "HOROVOD_GPU_OPERATIONS", "HOROVOD_GPU_ALLREDUCE",
                   "HOROVOD_GPU_ALLGATHER", "HOROVOD_GPU_BROADCAST", "HOROVOD_GPU_ALLTOALL",
                   "HOROVOD_GPU_REDUCESCATTER", "HOROVOD_MPI_THREADS_DISABLE", "HOROVOD_NUM_NCCL_STREAMS",
                   "HOROVOD_ELASTIC", "HOROVOD_ENABLE_XLA_OPS", "HOROVOD_BATCH_D2D_MEMCOPIES",
                   "HOROVOD_ADASUM_MPI_CHUNK_SIZE", "HOROVOD_DISABLE_GROUP_FUSION", "HOROVOD_CCL_BGT_AFFINITY",
                   "HOROVOD_CCL_CACHE", "HOROVOD_MLSL_BGT_AFFINITY"]


def test_table_covers_the_ignored_variables_and_spares_the_honoured_ones():
    for name in FORMERLY_SILENT:
        assert _inert_env.reason(name), name
    for name in HONOURED:
        assert _inert_env.reason(name) is None, name
    assert _inert_env.reason("PYHOROVOD_SHM") is None and _inert_env.reason("HOROVOD_") is None
    env = {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "1", "HOROVOD_CCL_ATL_TRANSPORT": "ofi",
           "HOROVOD_FUSION_THRESHOLD": "1", "HOROVOD_THREAD_AFFINITY": " ", "PATH": "/bin"}
    # Prefix entries cover every name below them; empty values count as unset, as everywhere.
    assert _inert_env.inert_set(env) == ["HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "HOROVOD_CCL_ATL_TRANSPORT"]


def body_report(tmp):
    import logging
    import pyhorovod as hvd
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append((record.levelname, record.getMessage()))
    logging.getLogger("pyhorovod").addHandler(Keep())
    hvd.init()
    r = hvd.rank()
    hvd.shutdown()
    hvd.init()   # a second init in the same process: no second report
    got = hvd.allreduce(np.array([r + 1.0]), op=hvd.Sum)
    hvd.shutdown()
    return {"seen": [m for m in seen if "no effect" in m[1]], "sum": float(got[0])}


def test_rank_0_reports_inert_variables_once():
    results = run_ranks(body_report, 2, timeout=90, args=("",),
                        env={"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "1", "HOROVOD_NUM_NCCL_STREAMS": "2",
                             "HOROVOD_CCL_BGT_AFFINITY": "3", "HOROVOD_CYCLE_TIME": "2"})
    assert results[0].value["sum"] == 3.0 and results[1].value["sum"] == 3.0
    assert results[1].value["seen"] == [], results[1].value
    seen = results[0].value["seen"]
    assert len(seen) == 1 and seen[0][0] == "WARNING", seen
    line = seen[0][1]
    assert "\n" not in line
    for name in ("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE (", "HOROVOD_CCL_BGT_AFFINITY (",
                 "HOROVOD_NUM_NCCL_STREAMS ("):
        assert name in line, line
    assert "HOROVOD_CYCLE_TIME (" not in line   # honoured


def test_gloo_timeout_sets_the_rendezvous_deadline():
    assert Config.from_env({"HOROVOD_GLOO_TIMEOUT_SECONDS": "7"}).connect_timeout_s == 7.0
    both = {"HOROVOD_GLOO_TIMEOUT_SECONDS": "7", "PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "4"}
    assert Config.from_env(both).connect_timeout_s == 4.0
    with pytest.raises(ValueError, match="HOROVOD_GLOO_TIMEOUT_SECONDS"):
        Config.from_env({"HOROVOD_GLOO_TIMEOUT_SECONDS": "-1"})


def test_default_collective_deadline_is_30_minutes_in_python_and_cxx():
    from pyhorovod import _core
    assert Config.from_env({}).timeout_s == 1800.0
    assert _core.EngineOptions().timeout_s == 1800.0


def body_peer_dies_while_waiting(tmp, victim):
    import pyhorovod as hvd
    hvd.init()
    r = hvd.rank()
    hvd.barrier()
    if r == victim:
        time.sleep(1.5)   # the other rank is inside its allreduce by now, waiting for this one
        stamp(os.path.join(tmp, "struck"))
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        hvd.allreduce(np.ones(4, np.float32), name="waits.for.the.victim")
    except hvd.HorovodInternalError as e:
        return {"t_err": time.time(), "kind": type(e).__name__, "message": str(e)}
    raise AssertionError("the allreduce returned although its peer was killed")


def test_dead_peer_is_noticed_at_once_under_the_default_deadline(tmp_path):
    # PYHOROVOD_TIMEOUT_SECONDS empty counts as unset: the 30-minute default deadline applies.
    results = run_ranks(body_peer_dies_while_waiting, 2, timeout=90, grace=30, check=False,
                        args=(str(tmp_path), 1), env={"PYHOROVOD_TIMEOUT_SECONDS": ""})
    assert results[1].returncode == -signal.SIGKILL, results
    assert results[0].returncode == 0 and results[0].value, results
    got = results[0].value
    delay = got["t_err"] - read_stamp(str(tmp_path / "struck"))
    print(f"MEASURED peer SIGKILLed while rank 0 waits in allreduce: {got['kind']} after {delay:.2f} s")
    assert got["kind"] == "HorovodInternalError" and "rank 1" in got["message"], got
    assert 0 <= delay < 5.0, got
