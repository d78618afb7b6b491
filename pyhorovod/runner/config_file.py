"""`--config-file FILE`: Horovod's YAML launcher configuration.

The file has sections (params, autotune, elastic, timeline, stall_check, library_options, logging) whose
keys are the launcher's flags under shorter names; a flag given on the command line wins over the file.
`load()` returns {argparse destination: value}, which the parser takes as its defaults. Unknown sections
or keys are errors rather than being skipped: a misspelt key would otherwise change nothing, silently.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from .horovod_flags import LOG_LEVELS

# section -> key -> (argparse destination, accepted types)
_NUM = (int, float)
KEYS: Dict[str, Dict[str, Tuple[str, tuple]]] = {
    "params": {"fusion_threshold_mb": ("fusion_threshold_mb", _NUM), "cycle_time_ms": ("cycle_time_ms", _NUM),
               "cache_capacity": ("cache_capacity", (int,)),
               "hierarchical_allreduce": ("hierarchical_allreduce", (bool,)),
               "hierarchical_allgather": ("hierarchical_allgather", (bool,))},
    "autotune": {"enabled": ("autotune", (bool,)), "log_file": ("autotune_log_file", (str,)),
                 "warmup_samples": ("autotune_warmup_samples", (int,)),
                 "steps_per_sample": ("autotune_steps_per_sample", (int,)),
                 "bayes_opt_max_samples": ("autotune_bayes_opt_max_samples", (int,)),
                 "gaussian_process_noise": ("autotune_gaussian_process_noise", _NUM)},
    "elastic": {"min_np": ("min_np", (int,)), "max_np": ("max_np", (int,)), "slots": ("slots_per_host", (int,)),
                "elastic_timeout": ("elastic_timeout", (int,)), "reset_limit": ("reset_limit", (int,))},
    "timeline": {"filename": ("timeline_filename", (str,)), "mark_cycles": ("timeline_mark_cycles", (bool,))},
    "stall_check": {"enabled": ("no_stall_check", (bool,)),
                    "warning_time_seconds": ("stall_check_warning_time_seconds", _NUM),
                    "shutdown_time_seconds": ("stall_check_shutdown_time_seconds", _NUM)},
    "library_options": {"mpi_threads_disable": ("mpi_threads_disable", (bool,)),
                        "num_nccl_streams": ("num_nccl_streams", (int,)),
                        "thread_affinity": ("thread_affinity", (int,)),
                        "ccl_bgt_affinity": ("ccl_bgt_affinity", (int,)),
                        "gloo_timeout_seconds": ("gloo_timeout_seconds", _NUM)},
    "logging": {"level": ("log_level", (str,)), "hide_timestamp": ("log_hide_timestamp", (bool,))},
}


def load(path: str) -> Dict[str, Any]:
    try:
        import yaml
    except ImportError:
        raise ValueError("--config-file needs PyYAML (pip install pyyaml)") from None
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ValueError(f"--config-file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"--config-file {path}: not valid YAML: {e}") from None
    return from_mapping(doc if doc is not None else {}, path)


def from_mapping(doc: Any, path: str = "config") -> Dict[str, Any]:
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected sections ({', '.join(KEYS)}), got {type(doc).__name__}")
    values: Dict[str, Any] = {}
    for section, body in doc.items():
        if section not in KEYS:
            raise ValueError(f"{path}: unknown section {section!r} (known: {', '.join(KEYS)})")
        if body is None:
            continue
        if not isinstance(body, dict):
            raise ValueError(f"{path}: section {section!r} must hold keys, got {type(body).__name__}")
        for key, value in body.items():
            if key not in KEYS[section]:
                raise ValueError(f"{path}: unknown key {section}.{key} (known: {', '.join(KEYS[section])})")
            dest, types = KEYS[section][key]
            # bool is an int to Python; a number key given true/false is a mistake, not 1/0.
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise ValueError(f"{path}: {section}.{key} must be {' or '.join(t.__name__ for t in types)}, "
                                 f"got {value!r}")
            if dest == "no_stall_check":
                value = not value
            if dest == "log_level":
                value = value.upper()
                if value not in LOG_LEVELS:
                    raise ValueError(f"{path}: logging.level {value!r} is not one of {', '.join(LOG_LEVELS)}")
            values[dest] = value
    return values
