"""horovodrun's tuning, library, autotune, timeline, stall-check and logging flags (the elastic ones are in
elastic_flags.py).

Horovod's launcher turns these flags into HOROVOD_* variables for the ranks; so does this one, with the
same names and units. A flag is
  * honoured: its variable is exported and the ranks read it (pyhorovod/_config.py);
  * inert: accepted, not exported, and named in one line at launch with the reason, which comes from
    pyhorovod/_inert_env.py (so honouring a variable later also honours its flag).
"""
from __future__ import annotations

import argparse
import os
from typing import Callable, Dict, List, NamedTuple, Optional

from pyhorovod import _inert_env

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")


class EnvFlag(NamedTuple):
    flag: str                          # as shown in messages
    dest: str                          # argparse destination (None: not given)
    env: str                           # the variable Horovod's launcher exports
    text: Callable[[object], str]      # value -> the variable's text


def _num(v) -> str:
    return f"{v:g}"


def _bool(v) -> str:
    return "1" if v else "0"


ENV_FLAGS = [
    EnvFlag("--fusion-threshold-mb", "fusion_threshold_mb", "HOROVOD_FUSION_THRESHOLD",
            lambda v: str(int(v * 1024 * 1024))),
    EnvFlag("--cycle-time-ms", "cycle_time_ms", "HOROVOD_CYCLE_TIME", _num),
    EnvFlag("--cache-capacity", "cache_capacity", "HOROVOD_CACHE_CAPACITY", str),
    EnvFlag("--hierarchical-allreduce", "hierarchical_allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE", _bool),
    EnvFlag("--hierarchical-allgather", "hierarchical_allgather", "HOROVOD_HIERARCHICAL_ALLGATHER", _bool),
    EnvFlag("--autotune", "autotune", "HOROVOD_AUTOTUNE", _bool),
    EnvFlag("--autotune-log-file", "autotune_log_file", "HOROVOD_AUTOTUNE_LOG", str),
    EnvFlag("--autotune-warmup-samples", "autotune_warmup_samples", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", str),
    EnvFlag("--autotune-steps-per-sample", "autotune_steps_per_sample", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",
            str),
    EnvFlag("--autotune-bayes-opt-max-samples", "autotune_bayes_opt_max_samples",
            "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", str),
    EnvFlag("--autotune-gaussian-process-noise", "autotune_gaussian_process_noise",
            "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", _num),
    EnvFlag("--timeline-filename", "timeline_filename", "HOROVOD_TIMELINE", os.path.abspath),
    EnvFlag("--timeline-mark-cycles", "timeline_mark_cycles", "HOROVOD_TIMELINE_MARK_CYCLES", _bool),
    EnvFlag("--no-stall-check", "no_stall_check", "HOROVOD_STALL_CHECK_DISABLE", _bool),
    EnvFlag("--stall-check-warning-time-seconds", "stall_check_warning_time_seconds",
            "HOROVOD_STALL_CHECK_TIME_SECONDS", _num),
    EnvFlag("--stall-check-shutdown-time-seconds", "stall_check_shutdown_time_seconds",
            "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", _num),
    EnvFlag("--mpi-threads-disable", "mpi_threads_disable", "HOROVOD_MPI_THREADS_DISABLE", _bool),
    EnvFlag("--num-nccl-streams", "num_nccl_streams", "HOROVOD_NUM_NCCL_STREAMS", str),
    EnvFlag("--thread-affinity", "thread_affinity", "HOROVOD_THREAD_AFFINITY", str),
    EnvFlag("--ccl-bgt-affinity", "ccl_bgt_affinity", "HOROVOD_CCL_BGT_AFFINITY", str),
    EnvFlag("--gloo-timeout-seconds", "gloo_timeout_seconds", "HOROVOD_GLOO_TIMEOUT_SECONDS", _num),
    EnvFlag("--log-level", "log_level", "HOROVOD_LOG_LEVEL", str),
    EnvFlag("--log-with(out)-timestamp", "log_hide_timestamp", "HOROVOD_LOG_HIDE_TIME", _bool),
]

# Flags of Horovod's launcher itself that set no variable, and why they change nothing here.
LAUNCHER_ONLY_INERT = {
    "disable_cache": ("--disable-cache", "pyhorovod run keeps no cache of host checks to disable"),
    "tcp_flag": ("--tcp", "pyhorovod's transport is TCP between hosts already (PYHOROVOD_SHM=0: TCP "
                          "within a host too)"),
}

# Flags whose value must not be negative (the variable would be rejected by every rank at init()).
NON_NEGATIVE = ("fusion_threshold_mb", "cycle_time_ms", "cache_capacity", "stall_check_warning_time_seconds",
                "stall_check_shutdown_time_seconds", "gloo_timeout_seconds")


def _switch(group, name: str, dest: str, help_on: str, negative: Optional[str] = None) -> None:
    """--NAME sets dest True; --no-NAME (or `negative`) sets it False; neither leaves None."""
    both = group.add_mutually_exclusive_group()
    both.add_argument(name, dest=dest, action="store_const", const=True, default=None, help=help_on)
    both.add_argument(negative or "--no-" + name[2:], dest=dest, action="store_const", const=False,
                      default=None, help=argparse.SUPPRESS)


def add_flags(p: argparse.ArgumentParser) -> None:
    t = p.add_argument_group("tuning (Horovod's flags; each becomes the HOROVOD_ variable it names)")
    t.add_argument("--fusion-threshold-mb", type=float, help="HOROVOD_FUSION_THRESHOLD, in MiB")
    t.add_argument("--cycle-time-ms", type=float, help="HOROVOD_CYCLE_TIME")
    t.add_argument("--cache-capacity", type=int, help="HOROVOD_CACHE_CAPACITY (responses cached)")
    t.add_argument("--disable-cache", action="store_true", help="no effect: there is no cache of host checks")
    _switch(t, "--hierarchical-allreduce", "hierarchical_allreduce", "no effect here (see the note at launch)")
    _switch(t, "--hierarchical-allgather", "hierarchical_allgather", "no effect here")
    _switch(t, "--autotune", "autotune", "no effect: pyhorovod has no autotuner")
    t.add_argument("--autotune-log-file", help="no effect (autotune)")
    t.add_argument("--autotune-warmup-samples", type=int, help="no effect (autotune)")
    t.add_argument("--autotune-steps-per-sample", type=int, help="no effect (autotune)")
    t.add_argument("--autotune-bayes-opt-max-samples", type=int, help="no effect (autotune)")
    t.add_argument("--autotune-gaussian-process-noise", type=float, help="no effect (autotune)")
    t.add_argument("--timeline-filename", help="HOROVOD_TIMELINE: Chrome-trace timeline written by rank 0")
    _switch(t, "--timeline-mark-cycles", "timeline_mark_cycles", "HOROVOD_TIMELINE_MARK_CYCLES=1")
    stall = t.add_mutually_exclusive_group()
    stall.add_argument("--no-stall-check", "--disable-stall-check", dest="no_stall_check", action="store_const",
                       const=True, default=None, help="HOROVOD_STALL_CHECK_DISABLE=1")
    stall.add_argument("--stall-check", dest="no_stall_check", action="store_const", const=False,
                       help="HOROVOD_STALL_CHECK_DISABLE=0 (the default)")
    t.add_argument("--stall-check-warning-time-seconds", type=float, help="HOROVOD_STALL_CHECK_TIME_SECONDS")
    t.add_argument("--stall-check-shutdown-time-seconds", type=float, help="HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")
    lib = p.add_argument_group("library")
    _switch(lib, "--mpi-threads-disable", "mpi_threads_disable", "no effect: no MPI library is linked")
    lib.add_argument("--num-nccl-streams", type=int, help="no effect: one NCCL stream")
    lib.add_argument("--thread-affinity", type=int, help="no effect: the engine thread is not pinned")
    lib.add_argument("--ccl-bgt-affinity", type=int, help="no effect: no oneCCL backend")
    lib.add_argument("--gloo-timeout-seconds", type=float,
                     help="HOROVOD_GLOO_TIMEOUT_SECONDS: deadline of the rendezvous in init()")
    lib.add_argument("--tcp", dest="tcp_flag", action="store_true", help="no effect: the transport is TCP")
    lib.add_argument("--binding-args", help="with --mpi: mpirun's binding arguments instead of "
                                            "'--bind-to none --map-by slot'")
    log = p.add_argument_group("logging")
    log.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper, help="HOROVOD_LOG_LEVEL")
    _switch(log, "--log-without-timestamp", "log_hide_timestamp",
            "no effect: engine log lines carry no timestamp", negative="--log-with-timestamp")
    p.add_argument("--log-hide-timestamp", dest="log_hide_timestamp", action="store_const", const=True,
                   help=argparse.SUPPRESS)
    log.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp", dest="prefix_timestamp",
                     action="store_true", help="begin each output line with the local time")


def knob_env(args: argparse.Namespace) -> Dict[str, str]:
    """The honoured flags the user gave -> the variables every rank gets."""
    for dest in NON_NEGATIVE:
        value = getattr(args, dest)
        if value is not None and value < 0:
            raise ValueError(f"--{dest.replace('_', '-')} must be >= 0, got {value:g}")
    env: Dict[str, str] = {}
    for f in ENV_FLAGS:
        value = getattr(args, f.dest)
        if value is not None and _inert_env.reason(f.env) is None:
            env[f.env] = f.text(value)
    return env


def inert_notes(args: argparse.Namespace) -> List[str]:
    """One line per flag given that has no effect here, with the reason."""
    notes = []
    for f in ENV_FLAGS:
        if getattr(args, f.dest) is not None and _inert_env.reason(f.env) is not None:
            notes.append(f"{f.flag} has no effect in pyhorovod: {_inert_env.reason(f.env)}")
    for dest, (flag, why) in LAUNCHER_ONLY_INERT.items():
        if getattr(args, dest):
            notes.append(f"{flag} has no effect in pyhorovod: {why}")
    if args.binding_args and not args.mpi:
        notes.append("--binding-args has no effect without --mpi: pyhorovod's own launcher binds no process")
    return notes
