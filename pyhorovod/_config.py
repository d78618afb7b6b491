"""Every environment variable pyhorovod reads, parsed in one place (design.md section 4).

Horovod's names keep Horovod's meaning; our own knobs carry the PYHOROVOD_ prefix. `Config.from_env()`
reads them into a plain dataclass (no side effects, so it is unit-testable with a dict), and
`Config.engine_options()` fills a `_core.EngineOptions`. An unparsable value raises ValueError naming the
variable. Empty values count as unset.

Rank variables (PYHOROVOD_RANK, HOROVOD_RANK, RANK, OMPI_COMM_WORLD_RANK, ...) are read by
pyhorovod/_bootstrap.py, which uses the helpers below; the README lists all variables.
"""
import dataclasses
import os
from typing import Mapping, Optional

# HOROVOD_LOG_LEVEL names -> csrc/common/logging.h LogLevel codes.
LOG_LEVELS = {"trace": 0, "debug": 1, "info": 2, "warning": 3, "error": 4, "fatal": 5}

_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f"}


def get_str(env: Mapping[str, str], name: str) -> Optional[str]:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def get_int(env: Mapping[str, str], name: str, minimum: Optional[int] = None) -> Optional[int]:
    value = get_str(env, name)
    if value is None:
        return None
    try:
        parsed = int(value, 10)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None
    if minimum is not None and parsed < minimum:
        raise ValueError(f"environment variable {name}={value!r} must be >= {minimum}")
    return parsed


def get_float(env: Mapping[str, str], name: str, minimum: Optional[float] = None) -> Optional[float]:
    value = get_str(env, name)
    if value is None:
        return None
    try:
        parsed = float(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not a number") from None
    if parsed != parsed or parsed in (float("inf"), float("-inf")):
        raise ValueError(f"environment variable {name}={value!r} must be finite")
    if minimum is not None and parsed < minimum:
        raise ValueError(f"environment variable {name}={value!r} must be >= {minimum}")
    return parsed


def get_bool(env: Mapping[str, str], name: str) -> Optional[bool]:
    value = get_str(env, name)
    if value is None:
        return None
    low = value.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"environment variable {name}={value!r} is not a boolean (use 1/0, true/false)")


def first(env: Mapping[str, str], names, getter=get_str, **kw):
    """Value of the first variable in `names` that is set (PYHOROVOD_ before HOROVOD_), else None."""
    for name in names:
        value = getter(env, name, **kw)
        if value is not None:
            return value
    return None


def store_limits(env: Mapping[str, str]) -> dict:
    """Keyword arguments for _core.TcpStoreServer (csrc/rendezvous/tcp_store.h; unset: its defaults)."""
    limits = {"max_value_bytes": get_int(env, "PYHOROVOD_STORE_MAX_VALUE_BYTES", minimum=1),
              "max_total_bytes": get_int(env, "PYHOROVOD_STORE_MAX_BYTES", minimum=1),
              "handshake_s": get_float(env, "PYHOROVOD_STORE_HANDSHAKE_SECONDS", minimum=0.001)}
    if (limits["max_value_bytes"] or 0) > 64 << 20:
        raise ValueError("environment variable PYHOROVOD_STORE_MAX_VALUE_BYTES must be <= 67108864 (64 MiB)")
    return {k: v for k, v in limits.items() if v is not None}


@dataclasses.dataclass
class Config:
    """Engine and transport knobs. Defaults equal the C++ defaults (csrc/engine/engine.h, tuning.h)."""

    fusion_threshold_bytes: int = 128 << 20   # HOROVOD_FUSION_THRESHOLD (0 disables fusion)
    fusion_max_tensor_bytes: int = 1 << 20    # PYHOROVOD_FUSION_MAX_TENSOR_BYTES (larger CPU tensors: alone)
    cycle_time_ms: float = 1.0                # HOROVOD_CYCLE_TIME
    cache_capacity: int = 1024                # HOROVOD_CACHE_CAPACITY (0 disables the response cache)
    timeline_path: str = ""                   # HOROVOD_TIMELINE ("DYNAMIC": off until start_timeline())
    timeline_mark_cycles: bool = False        # HOROVOD_TIMELINE_MARK_CYCLES
    stall_check_s: float = 60.0               # HOROVOD_STALL_CHECK_TIME_SECONDS
    stall_shutdown_s: float = 0.0             # HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (0: never)
    stall_check_disable: bool = False         # HOROVOD_STALL_CHECK_DISABLE
    log_level: int = LOG_LEVELS["warning"]    # HOROVOD_LOG_LEVEL
    dynamic_process_sets: bool = False        # HOROVOD_DYNAMIC_PROCESS_SETS
    iface: Optional[str] = None               # PYHOROVOD_IFACE, else HOROVOD_GLOO_IFACE
    # PYHOROVOD_TIMEOUT_SECONDS: default collective deadline. Long (torch.distributed's 30 minutes), since
    # ranks legitimately wait in a collective while rank 0 evaluates or checkpoints; a dead peer is
    # detected at once by its closed connection, not by this deadline.
    timeout_s: float = 1800.0
    # PYHOROVOD_CONNECT_TIMEOUT_SECONDS, else HOROVOD_GLOO_TIMEOUT_SECONDS: bootstrap deadline
    connect_timeout_s: float = 60.0
    segment_bytes: int = 0                    # PYHOROVOD_SEGMENT_BYTES (0: from the alpha-beta model)
    small_threshold_bytes: int = 0            # PYHOROVOD_SMALL_THRESHOLD_BYTES (0: from the model)
    shm_enable: bool = True                   # PYHOROVOD_SHM
    shm_spin_us: int = -1                     # PYHOROVOD_SHM_SPIN_US: poll the rings before sleeping (-1 auto)
    shm_spin_yield: int = -1                  # PYHOROVOD_SHM_SPIN_YIELD: 1 yield while polling, 0 not, -1 auto
    hostname: Optional[str] = None            # PYHOROVOD_HOSTNAME, else HOROVOD_HOSTNAME (host grouping)
    gpu_path: str = "auto"                    # PYHOROVOD_GPU_PATH: auto, nccl or staged (CUDA collectives)
    hierarchical_allreduce: int = -1          # HOROVOD_HIERARCHICAL_ALLREDUCE: 1 on, 0 off, -1 by size
    hierarchical_allgather: int = -1          # HOROVOD_HIERARCHICAL_ALLGATHER: 1 on, 0 off, -1 by size
    autotune: bool = False                    # HOROVOD_AUTOTUNE (pyhorovod/_autotune.py)
    autotune_log: str = ""                    # HOROVOD_AUTOTUNE_LOG: CSV written by rank 0
    autotune_warmup_samples: int = 3          # HOROVOD_AUTOTUNE_WARMUP_SAMPLES: samples not scored
    autotune_steps_per_sample: int = 10       # HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE
    autotune_max_samples: int = 20            # HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES: scored trials at most

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "Config":
        env = os.environ if env is None else env
        c = cls()
        v = get_int(env, "HOROVOD_FUSION_THRESHOLD", minimum=0)
        if v is not None:
            c.fusion_threshold_bytes = v
        v = get_int(env, "PYHOROVOD_FUSION_MAX_TENSOR_BYTES", minimum=0)
        if v is not None:
            c.fusion_max_tensor_bytes = v
        v = get_float(env, "HOROVOD_CYCLE_TIME", minimum=0.0)
        if v is not None:
            c.cycle_time_ms = v
        v = get_int(env, "HOROVOD_CACHE_CAPACITY", minimum=0)
        if v is not None:
            c.cache_capacity = v
        v = get_str(env, "HOROVOD_TIMELINE")
        if v is not None:
            # Horovod's HOROVOD_TIMELINE=DYNAMIC means "no file yet; hvd.start_timeline() later".
            c.timeline_path = "" if v.upper() == "DYNAMIC" else v
        v = get_bool(env, "HOROVOD_TIMELINE_MARK_CYCLES")
        if v is not None:
            c.timeline_mark_cycles = v
        v = get_float(env, "HOROVOD_STALL_CHECK_TIME_SECONDS", minimum=0.0)
        if v is not None:
            c.stall_check_s = v
        v = get_float(env, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", minimum=0.0)
        if v is not None:
            c.stall_shutdown_s = v
        v = get_bool(env, "HOROVOD_STALL_CHECK_DISABLE")
        if v is not None:
            c.stall_check_disable = v
        v = get_str(env, "HOROVOD_LOG_LEVEL")
        if v is not None:
            if v.lower() not in LOG_LEVELS:
                raise ValueError(f"environment variable HOROVOD_LOG_LEVEL={v!r} is not one of "
                                 f"{', '.join(LOG_LEVELS)}")
            c.log_level = LOG_LEVELS[v.lower()]
        v = get_bool(env, "HOROVOD_DYNAMIC_PROCESS_SETS")
        if v is not None:
            c.dynamic_process_sets = v
        c.iface = first(env, ["PYHOROVOD_IFACE", "HOROVOD_GLOO_IFACE"])
        v = get_float(env, "PYHOROVOD_TIMEOUT_SECONDS", minimum=0.001)
        if v is not None:
            c.timeout_s = v
        v = first(env, ["PYHOROVOD_CONNECT_TIMEOUT_SECONDS", "HOROVOD_GLOO_TIMEOUT_SECONDS"], get_float,
                  minimum=0.001)
        if v is not None:
            c.connect_timeout_s = v
        v = get_int(env, "PYHOROVOD_SEGMENT_BYTES", minimum=0)
        if v is not None:
            c.segment_bytes = v
        v = get_int(env, "PYHOROVOD_SMALL_THRESHOLD_BYTES", minimum=0)
        if v is not None:
            c.small_threshold_bytes = v
        v = get_bool(env, "PYHOROVOD_SHM")
        if v is not None:
            c.shm_enable = v
        v = get_int(env, "PYHOROVOD_SHM_SPIN_US", minimum=-1)
        if v is not None:
            c.shm_spin_us = v
        v = get_int(env, "PYHOROVOD_SHM_SPIN_YIELD", minimum=-1)
        if v is not None:
            if v > 1:
                raise ValueError(f"environment variable PYHOROVOD_SHM_SPIN_YIELD={v} must be -1, 0 or 1")
            c.shm_spin_yield = v
        c.hostname = first(env, ["PYHOROVOD_HOSTNAME", "HOROVOD_HOSTNAME"])
        v = get_str(env, "PYHOROVOD_GPU_PATH")
        if v is not None:
            if v.lower() not in ("auto", "nccl", "staged"):
                raise ValueError(f"environment variable PYHOROVOD_GPU_PATH={v!r} is not one of auto, nccl, staged")
            c.gpu_path = v.lower()
        for name, attr in (("HOROVOD_HIERARCHICAL_ALLREDUCE", "hierarchical_allreduce"),
                           ("HOROVOD_HIERARCHICAL_ALLGATHER", "hierarchical_allgather")):
            v = get_bool(env, name)
            if v is not None:
                setattr(c, attr, int(v))
        v = get_bool(env, "HOROVOD_AUTOTUNE")
        if v is not None:
            c.autotune = v
        c.autotune_log = get_str(env, "HOROVOD_AUTOTUNE_LOG") or ""
        for name, attr, low in (("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "autotune_warmup_samples", 0),
                                ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "autotune_steps_per_sample", 1),
                                ("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "autotune_max_samples", 1)):
            v = get_int(env, name, minimum=low)
            if v is not None:
                setattr(c, attr, v)
        return c

    def engine_options(self, *, rank, size, local_rank, local_size, cross_rank, cross_size, store_host,
                       store_port, secret: bytes, bind_host, store_prefix, process_sets=()):
        """A filled _core.EngineOptions for this process (topology and rendezvous from the bootstrap)."""
        from pyhorovod import _core

        tuning = _core.Tuning()
        tuning.segment_bytes = self.segment_bytes
        tuning.small_threshold_bytes = self.small_threshold_bytes

        connect = _core.ConnectOptions()
        connect.rank, connect.size = rank, size
        connect.local_rank, connect.local_size = local_rank, local_size
        connect.store_host, connect.store_port = store_host, store_port
        connect.secret = secret
        connect.bind_host = bind_host
        connect.store_prefix = store_prefix
        connect.connect_timeout_s = self.connect_timeout_s
        connect.shm_enable = self.shm_enable
        if hasattr(connect, "shm_spin_us"):  # newer cores only
            connect.shm_spin_us, connect.shm_spin_yield = self.shm_spin_us, self.shm_spin_yield
        connect.tuning = tuning

        opts = _core.EngineOptions()
        opts.connect = connect
        opts.cross_rank, opts.cross_size = cross_rank, cross_size
        opts.fusion_threshold_bytes = self.fusion_threshold_bytes
        opts.fusion_max_tensor_bytes = self.fusion_max_tensor_bytes
        opts.cycle_time_ms = self.cycle_time_ms
        opts.cache_capacity = self.cache_capacity
        opts.stall_check_s = self.stall_check_s
        opts.stall_shutdown_s = self.stall_shutdown_s
        opts.stall_check_disable = self.stall_check_disable
        opts.timeline_path = self.timeline_path
        opts.timeline_mark_cycles = self.timeline_mark_cycles
        opts.timeout_s = self.timeout_s
        opts.dynamic_process_sets = self.dynamic_process_sets
        opts.process_sets = [list(r) for r in process_sets]
        opts.log_level = self.log_level
        opts.gpu_path = self.gpu_path
        if hasattr(opts, "hierarchical_allreduce"):  # newer cores only
            opts.hierarchical_allreduce = self.hierarchical_allreduce
            opts.hierarchical_allgather = self.hierarchical_allgather
            opts.host_name = self.hostname or ""
        return opts
