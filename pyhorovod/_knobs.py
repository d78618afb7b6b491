"""Every user-facing environment variable, declared once: name, Horovod alias, type, default, meaning.

The table below is the only list. From it come the parsing and the engine options (pyhorovod/_config.py
walks the knobs that carry a `field`), the rendezvous store's limits (`option="store.*"`), and the README's
table of environment variables (`python -m pyhorovod._knobs --markdown` prints it; tests/test_knobs.py fails
when the README and this table differ).

Knobs without a `field` are parsed where they are used (`reader`), because their parsing is part of a
larger decision: the rank variables (pyhorovod/_bootstrap.py tries several launchers' names in turn), the
store address and the secret (pyhorovod/_rendezvous.py), the launcher's and the noise-scale tap's own.

Not declared here, on purpose (NOT_KNOBS below gives each one's reason):
- variables one pyhorovod process sets for another, never a user: the secret file's one-shot flag, the
  elastic worker's markers, the autoscaler's settings (the launcher's --autoscale flags become them) and
  the function launcher's hand-over;
- the variables of other launchers that pyhorovod only recognises (RANK, WORLD_SIZE, OMPI_COMM_WORLD_*,
  PMI_*, SLURM_*, MASTER_ADDR, TORCHELASTIC_RUN_ID): their owners document them;
- Horovod's variables that have no effect here: pyhorovod/_inert_env.py lists those, with the reason.
"""
import dataclasses
import sys
from typing import Any, Mapping, Optional, Tuple

from pyhorovod._env_values import first, get_bool, get_float, get_int, get_str

# HOROVOD_LOG_LEVEL names -> csrc/common/logging.h LogLevel codes.
LOG_LEVELS = {"trace": 0, "debug": 1, "info": 2, "warning": 3, "error": 4, "fatal": 5}

_GETTERS = {"int": get_int, "float": get_float, "bool": get_bool, "str": get_str, "choice": get_str,
            "tristate": get_bool, "timeline": get_str}


@dataclasses.dataclass(frozen=True)
class Knob:
    """One environment variable.

    kind: int, float, bool, str; choice (one of `choices`, case-insensitive, mapped to its value);
    tristate (a boolean stored as 1/0, -1 when unset: "decide by yourself"); timeline (a path, or DYNAMIC).
    field: the Config attribute it fills; option: where engine_options() puts it ("engine.x", "connect.x",
    "tuning.x") or "store.x" for the store server's keyword x. newer_core: the option exists only in newer
    builds of _core (skipped when absent). shown: the README's default column, when the value alone would
    mislead ("model" for a 0 that means "computed"). reader: where it is parsed when it has no field.
    """

    name: str
    kind: str
    default: Any
    meaning: str
    alias: Optional[str] = None
    minimum: Optional[float] = None
    choices: Optional[Mapping[str, Any]] = None
    allowed: Tuple[int, ...] = ()
    field: Optional[str] = None
    option: Optional[str] = None
    newer_core: bool = False
    shown: Optional[str] = None
    reader: str = "pyhorovod/_config.py"

    @property
    def names(self) -> Tuple[str, ...]:
        """The variables read, in order: our name wins over Horovod's."""
        return (self.name,) + ((self.alias,) if self.alias else ())

    def read(self, env: Mapping[str, str]):
        """The parsed value, or None when the variable (and its alias) is unset or empty."""
        kw = {} if self.minimum is None else {"minimum": self.minimum}
        value = first(env, self.names, _GETTERS[self.kind], **kw)
        if value is None:
            return None
        if self.kind == "choice":
            if value.lower() not in self.choices:
                raise ValueError(f"environment variable {self.name}={value!r} is not one of "
                                 f"{', '.join(self.choices)}")
            return self.choices[value.lower()]
        if self.allowed and value not in self.allowed:
            *head, last = [str(a) for a in self.allowed]
            raise ValueError(f"environment variable {self.name}={value} must be {', '.join(head)} or {last}")
        if self.kind == "tristate":
            return int(value)
        if self.kind == "timeline":
            # Horovod's HOROVOD_TIMELINE=DYNAMIC means "no file yet; hvd.start_timeline() later".
            return "" if value.upper() == "DYNAMIC" else value
        return value

    def default_text(self) -> str:
        if self.shown is not None:
            return self.shown
        if self.default is None or self.default == "":
            return "-"
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        if isinstance(self.default, float):
            return f"{self.default:g}"
        return str(self.default)


_BOOTSTRAP, _RENDEZVOUS = "pyhorovod/_bootstrap.py", "pyhorovod/_rendezvous.py"
_LAUNCHER, _NOISE = "pyhorovod/runner", "pyhorovod/torch/noise_tap.py"

# Order matters twice: Config.from_env reads in this order (the first bad value is the one reported), and
# the README lists the knobs in it.
KNOBS: Tuple[Knob, ...] = (
    Knob("HOROVOD_FUSION_THRESHOLD", "int", 128 << 20, "bytes of small allreduces fused into one buffer; 0 "
         "disables fusion", minimum=0, field="fusion_threshold_bytes", option="engine.fusion_threshold_bytes"),
    Knob("PYHOROVOD_FUSION_MAX_TENSOR_BYTES", "int", 1 << 20, "a CPU tensor larger than this is reduced alone, "
         "in place, not copied through the fusion buffer; 0: fuse any size (Horovod's rule)", minimum=0,
         field="fusion_max_tensor_bytes", option="engine.fusion_max_tensor_bytes"),
    Knob("HOROVOD_CYCLE_TIME", "float", 1.0, "ms the engine waits after a round before an idle one", minimum=0.0,
         field="cycle_time_ms", option="engine.cycle_time_ms"),
    Knob("HOROVOD_CACHE_CAPACITY", "int", 1024, "responses cached (steady state skips name negotiation); 0 "
         "disables", minimum=0, field="cache_capacity", option="engine.cache_capacity"),
    Knob("HOROVOD_TIMELINE", "timeline", "", "path of a Chrome-trace timeline (rank 0); `DYNAMIC`: off until "
         "`start_timeline()`", field="timeline_path", option="engine.timeline_path", shown="off"),
    Knob("HOROVOD_TIMELINE_MARK_CYCLES", "bool", False, "mark engine cycles in the timeline",
         field="timeline_mark_cycles", option="engine.timeline_mark_cycles"),
    Knob("HOROVOD_STALL_CHECK_TIME_SECONDS", "float", 60.0, "warn about ranks that have not submitted a tensor "
         "others wait for, and about a running collective that has not moved a byte for this long (naming the "
         "op and the peers it waits for)", minimum=0.0, field="stall_check_s", option="engine.stall_check_s"),
    Knob("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "float", 0.0, "fail stalled requests, and running collectives "
         "that moved no byte, after this long (0: never)", minimum=0.0, field="stall_shutdown_s",
         option="engine.stall_shutdown_s"),
    Knob("HOROVOD_STALL_CHECK_DISABLE", "bool", False, "no stall warnings", field="stall_check_disable",
         option="engine.stall_check_disable"),
    Knob("HOROVOD_LOG_LEVEL", "choice", LOG_LEVELS["warning"], "trace, debug, info, warning, error, fatal: the "
         "C++ core's level and the `pyhorovod` Python logger's (see \"Logging\")", choices=LOG_LEVELS,
         field="log_level", option="engine.log_level", shown="warning"),
    Knob("HOROVOD_DYNAMIC_PROCESS_SETS", "bool", False, "allow `add_process_set()` / `remove_process_set()`",
         field="dynamic_process_sets", option="engine.dynamic_process_sets"),
    Knob("PYHOROVOD_IFACE", "str", None, "network interface to bind to between hosts (PYHOROVOD_ wins)",
         alias="HOROVOD_GLOO_IFACE", field="iface"),
    # Long (torch.distributed's 30 minutes), since ranks legitimately wait in a collective while rank 0
    # evaluates or checkpoints; a dead peer is detected at once by its closed connection, not by this.
    Knob("PYHOROVOD_TIMEOUT_SECONDS", "float", 1800.0, "deadline of each collective; past it, "
         "`HorovodTimeoutError` (long, so that ranks may wait while rank 0 evaluates or checkpoints; a dead "
         "peer fails a collective at once)", minimum=0.001, field="timeout_s", option="engine.timeout_s"),
    Knob("PYHOROVOD_CONNECT_TIMEOUT_SECONDS", "float", 60.0, "deadline of the rendezvous and connection set-up "
         "in `init()` (PYHOROVOD_ wins)", alias="HOROVOD_GLOO_TIMEOUT_SECONDS", minimum=0.001,
         field="connect_timeout_s", option="connect.connect_timeout_s"),
    Knob("PYHOROVOD_SEGMENT_BYTES", "int", 0, "ring segment size; 0 or unset: from the alpha-beta model",
         minimum=0, field="segment_bytes", option="tuning.segment_bytes", shown="model"),
    Knob("PYHOROVOD_SMALL_THRESHOLD_BYTES", "int", 0, "below it, allreduce uses the latency-optimal algorithm "
         "instead of the ring", minimum=0, field="small_threshold_bytes", option="tuning.small_threshold_bytes",
         shown="model"),
    Knob("PYHOROVOD_SHM", "bool", True, "shared memory between ranks of one host", field="shm_enable",
         option="connect.shm_enable"),
    Knob("PYHOROVOD_SHM_SPIN_US", "int", -1, "shared memory: µs to poll the rings before sleeping (-1: "
         "automatic)", minimum=-1, field="shm_spin_us", option="connect.shm_spin_us", newer_core=True),
    Knob("PYHOROVOD_SHM_SPIN_YIELD", "int", -1, "shared memory: yield the CPU while polling (1), or not (0); "
         "-1: automatic", minimum=-1, allowed=(-1, 0, 1), field="shm_spin_yield",
         option="connect.shm_spin_yield", newer_core=True),
    Knob("PYHOROVOD_SHM_DIRECT_BYTES", "int", None, "shared memory: copies of at least this many bytes (a "
         "rank's block in allgather, alltoall and reducescatter; in broadcast, the root's 1/p share of each "
         "reader's buffer) are one copy straight "
         "between the two ranks' buffers (process_vm_writev into the peer's output for allgather and alltoall, "
         "process_vm_readv of its input for reducescatter; a broadcast's readers read all but the last 1/p, "
         "which the root writes) instead of two copies through the ring; 0: off. Used only where "
         "every pair of ranks can (probed at start; refused by ptrace restrictions, seccomp, pid namespaces)",
         minimum=0, field="shm_direct_bytes", option="connect.shm_direct_bytes", newer_core=True,
         shown="1048576 (262144 for all but broadcast where a host has more ranks than CPUs)"),
    Knob("PYHOROVOD_SHM_DIRECT_ADAPT", "choice", "auto", "shared memory: `auto` times the allgather, alltoall "
         "and reducescatter calls whose pieces lie between 64 KiB and PYHOROVOD_SHM_DIRECT_BYTES in both copy "
         "paths and votes each rank's faster one; while more than half the ranks vote for single copies, those "
         "pieces go as single copies too (the ring slows 4x where the host's cores hand cache lines to each "
         "other slowly, single copies do not); `off`: this rank never votes; `wide` / `narrow`: it votes so "
         "once", choices={"auto": "auto", "off": "off", "wide": "wide", "narrow": "narrow"},
         field="shm_direct_adapt", option="engine.copy_path_adapt", newer_core=True),
    Knob("PYHOROVOD_ALLREDUCE_SINGLE_COPY", "choice", "auto", "shared memory: `auto` times the allreduces of at "
         "least 8 MiB whose blocks (1/size of the buffer) reach the single-copy threshold in both algorithms "
         "and votes each rank's faster one; while more than half the ranks vote for single copies, those "
         "allreduces read and write each other's buffers directly (process_vm_readv / writev) instead of "
         "going through the ring (which slows several-fold where the host's cores hand cache lines to each "
         "other slowly); `off`: this rank never votes; `single` / `ring`: it votes so once",
         choices={"auto": "auto", "off": "off", "single": "single", "ring": "ring"},
         field="allreduce_single_copy", option="engine.allreduce_path_adapt", newer_core=True),
    Knob("PYHOROVOD_SHM_DIRECT_REFUSE", "bool", False, "test hook: the single-copy probe reports refused, so "
         "every rank keeps the two-copy path", field="shm_direct_refuse_probe",
         option="connect.shm_direct_refuse_probe", newer_core=True),
    Knob("PYHOROVOD_HOSTNAME", "str", None, "host name used to group ranks by host", alias="HOROVOD_HOSTNAME",
         field="hostname", option="engine.host_name", newer_core=True, shown="gethostname()"),
    Knob("PYHOROVOD_GPU_PATH", "choice", "auto", "CUDA collectives: `nccl`, `staged` (device -> pinned host -> "
         "CPU ring -> device), or `auto`: NCCL unless two ranks of a process set share one GPU, then staged for "
         "all of them (logged)", choices={"auto": "auto", "nccl": "nccl", "staged": "staged"},
         field="gpu_path", option="engine.gpu_path"),
    Knob("HOROVOD_HIERARCHICAL_ALLREDUCE", "tristate", -1, "1: allreduce of CPU tensors over the global set in "
         "two levels (reduce-scatter inside each host, one cross-host allreduce per local rank on its shard, "
         "allgather inside the host); 0: one flat ring; unset: chosen per message size by an alpha-beta model "
         "fitted at `init()` from timed flat, intra-host and cross-host rings, and below the small-message "
         "threshold only from the size at which timed runs at 4, 16 and 64 KiB showed two levels 10% faster "
         "(about 0.5 s at 1 Gbit/s; only when there are >= 2 hosts of equal size >= 2)", field="hierarchical_allreduce",
         option="engine.hierarchical_allreduce", newer_core=True, shown="unset"),
    Knob("HOROVOD_HIERARCHICAL_ALLGATHER", "tristate", -1, "the same for allgather (gather inside the host, "
         "swap 1/L of each host's bytes across hosts, gather inside the host)", field="hierarchical_allgather",
         option="engine.hierarchical_allgather", newer_core=True, shown="unset"),
    Knob("HOROVOD_AUTOTUNE", "bool", False, "1: during the first `DistributedOptimizer` steps, try fusion "
         "thresholds, cycle times, hierarchical on/off and segment sizes (coordinate descent over a fixed grid, "
         "rank 0 decides and broadcasts each trial), then keep the fastest", field="autotune"),
    Knob("HOROVOD_AUTOTUNE_LOG", "str", "", "autotune: CSV written by rank 0, one row per trial and a last "
         "`final` row", field="autotune_log"),
    Knob("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "int", 3, "autotune: samples run before scoring starts", minimum=0,
         field="autotune_warmup_samples"),
    Knob("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "int", 10, "autotune: optimizer steps per sample (one trial)",
         minimum=1, field="autotune_steps_per_sample"),
    Knob("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "int", 20, "autotune: at most this many scored trials",
         minimum=1, field="autotune_max_samples"),
    # The store server's limits: unset leaves the C++ defaults (csrc/rendezvous/tcp_store.h), shown here.
    Knob("PYHOROVOD_STORE_MAX_VALUE_BYTES", "int", 1 << 20, "rendezvous store: largest value one `set` may "
         "store (at most 64 MiB); beyond it, the writer's `set` fails (`ValueError` in pyhorovod's API) naming "
         "this variable", minimum=1, option="store.max_value_bytes"),
    Knob("PYHOROVOD_STORE_MAX_BYTES", "int", 64 << 20, "rendezvous store: keys + values it holds (plus 64 bytes "
         "per key, and requests in transit); beyond it, the writer's `set` fails the same way", minimum=1,
         option="store.max_total_bytes"),
    Knob("PYHOROVOD_STORE_HANDSHAKE_SECONDS", "float", 2.0, "rendezvous store: a connection that has not proved "
         "the secret within this is closed. The store also holds at most 4,096 connections, and never more "
         "than a quarter of `ulimit -n`", minimum=0.001, option="store.handshake_s"),
    # Parsed where they are used (module docstring).
    Knob("PYHOROVOD_RANK", "int", None, "this rank's place in the job: its rank (the other sources: \"How "
         "ranks find each other\")", alias="HOROVOD_RANK", reader=_BOOTSTRAP),
    Knob("PYHOROVOD_SIZE", "int", None, "the number of ranks", alias="HOROVOD_SIZE", reader=_BOOTSTRAP),
    Knob("PYHOROVOD_LOCAL_RANK", "int", None, "this rank's index among the ranks of its host",
         alias="HOROVOD_LOCAL_RANK", reader=_BOOTSTRAP),
    Knob("PYHOROVOD_LOCAL_SIZE", "int", None, "the number of ranks on this host", alias="HOROVOD_LOCAL_SIZE",
         reader=_BOOTSTRAP),
    Knob("PYHOROVOD_CROSS_RANK", "int", None, "the index of this rank's host", alias="HOROVOD_CROSS_RANK",
         reader=_BOOTSTRAP),
    Knob("PYHOROVOD_CROSS_SIZE", "int", None, "the number of hosts", alias="HOROVOD_CROSS_SIZE",
         reader=_BOOTSTRAP),
    Knob("PYHOROVOD_STORE_ADDR", "str", None, "rendezvous store's host (the alias must point to a pyhorovod "
         "store)", alias="HOROVOD_GLOO_RENDEZVOUS_ADDR", reader=_RENDEZVOUS),
    Knob("PYHOROVOD_STORE_PORT", "int", None, "rendezvous store's port", alias="HOROVOD_GLOO_RENDEZVOUS_PORT",
         reader=_RENDEZVOUS),
    Knob("PYHOROVOD_SECRET", "str", None, "the per-job secret every connection proves; under torchrun without "
         "it, a non-secret job token is derived (as torch.distributed's store, unauthenticated)",
         reader=_RENDEZVOUS),
    Knob("PYHOROVOD_SECRET_FILE", "str", None, "a file holding the secret (its bytes, trailing newline "
         "stripped)", reader=_RENDEZVOUS),
    Knob("PYHOROVOD_RESTART_COUNT", "int", 0, "set by `pyhorovod run --max-restarts`: how often the job was "
         "restarted (resume from a checkpoint)", reader=_LAUNCHER),
    Knob("HOROVOD_START_TIMEOUT", "float", 30.0, "`pyhorovod run`: seconds for every rank to reach the "
         "rendezvous (`--start-timeout`)", reader=_LAUNCHER),
    Knob("HOROVOD_ELASTIC_TIMEOUT", "float", 600.0, "elastic `pyhorovod run`: seconds the job may have fewer "
         "than `--min-np` workers (`--elastic-timeout`); a worker's wait for its place in a generation",
         minimum=0.0, reader=_LAUNCHER),
    Knob("PYHOROVOD_ELASTIC_RESET_TIMEOUT_SECONDS", "float", 60.0, "elastic `pyhorovod run`: once one worker "
         "asks for the next generation, seconds the others have to follow before they are stopped and their "
         "hosts blacklisted", minimum=0.001, reader=_LAUNCHER),
    Knob("PYHOROVOD_KILL_GRACE_SECONDS", "float", None, "`pyhorovod run`: seconds between SIGTERM and SIGKILL "
         "when stopping ranks", minimum=0.0, reader=_LAUNCHER),
    Knob("PYHOROVOD_RSH_AGENT", "str", "ssh", "`pyhorovod run`: command that starts remote ranks "
         "(`--rsh-agent`)", reader=_LAUNCHER),
    Knob("PYHOROVOD_NOISE_SCALE_EVERY", "int", 1, "`measure_noise_scale`: measure every N-th step",
         reader=_NOISE),
    Knob("PYHOROVOD_NOISE_SCALE_HORIZON", "float", None, "`measure_noise_scale`: the EMAs span this many "
         "examples (beta = 1 - global batch / N), the same stretch of training at every worker count",
         reader=_NOISE, shown="unset (EMA beta 0.99)"),
    Knob("PYHOROVOD_NOISE_SCALE_LOG_EVERY", "int", 100, "`measure_noise_scale`: rank 0 logs the advisor's line "
         "every N steps (logger `pyhorovod.scaling.noise_scale`)", reader=_NOISE),
    Knob("PYHOROVOD_HOROVOD_COMPAT", "bool", False, "`pyhorovod run` (read in `pyhorovod/_compat`): 1 lets the "
         "ranks `import horovod` (as `--horovod-compat`)", reader="pyhorovod/_compat"),
    Knob("PYHOROVOD_WITH_NCCL", "str", "AUTO", "build time (pip / CMake): AUTO builds the GPU backend when nvcc "
         "and NCCL are found, ON requires them, OFF skips", reader="setup.py, CMakeLists.txt"),
)

_INTERNAL = "set by pyhorovod's launcher for the processes it starts"
NOT_KNOBS: Mapping[str, str] = {
    "PYHOROVOD_SECRET_FILE_ONCE": _INTERNAL + ": the secret file is deleted once read",
    "PYHOROVOD_ELASTIC": _INTERNAL + ": this worker belongs to an elastic job",
    "PYHOROVOD_WORKER_ID": _INTERNAL + ": the elastic worker's identity across generations",
    "PYHOROVOD_AUTOSCALE": _INTERNAL + " from --autoscale",
    "PYHOROVOD_AUTOSCALE_MIN_NP": _INTERNAL + " from --min-np",
    "PYHOROVOD_AUTOSCALE_MAX_NP": _INTERNAL + " from --max-np",
    "PYHOROVOD_AUTOSCALE_EVERY": _INTERNAL + " from --autoscale-every",
    "PYHOROVOD_AUTOSCALE_MARGIN": _INTERNAL + " from --autoscale-margin",
    "PYHOROVOD_AUTOSCALE_HOSTS": _INTERNAL + " from the --autoscale flags",
    "PYHOROVOD_AUTOSCALE_TRACE": _INTERNAL + " from --autoscale-trace",
    "PYHOROVOD_FUNC_STORE": _INTERNAL + ": where a launched function's result goes",
    "PYHOROVOD_FUNC_SECRET": _INTERNAL + ": the secret of that store",
}

BY_NAME: Mapping[str, Knob] = {k.name: k for k in KNOBS}
CONFIG_KNOBS: Tuple[Knob, ...] = tuple(k for k in KNOBS if k.field)
STORE_KNOBS: Tuple[Knob, ...] = tuple(k for k in KNOBS if (k.option or "").startswith("store."))


def markdown_table() -> str:
    """The README's table of environment variables, one row per knob."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for k in KNOBS:
        rows.append(f"| {', '.join(f'`{n}`' for n in k.names)} | {k.default_text()} | {k.meaning} |")
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["--markdown"]:
        print("usage: python -m pyhorovod._knobs --markdown", file=sys.stderr)
        return 2
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
