"""The elastic flags of `pyhorovod run` (Horovod's names), and the checks made before any worker starts.

Any of these flags makes the job elastic (elastic_driver.py); without
them the launcher keeps its fixed-size, fail-fast behaviour (launch.py)."""
from __future__ import annotations

import argparse
import os
from typing import Dict, List, Optional

from pyhorovod._knobs import BY_NAME as KNOBS

from .discovery import HostDiscovery
from .hosts import HostSpec

TIMEOUT_ENV = "HOROVOD_ELASTIC_TIMEOUT"
DEFAULT_TIMEOUT_S = KNOBS[TIMEOUT_ENV].default


def add_flags(p: argparse.ArgumentParser) -> None:
    el = p.add_argument_group("elastic training (any of these flags makes the job elastic)")
    el.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int,
                    help="fewest workers the job runs with (default -np)")
    el.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int,
                    help="most workers the job grows to when hosts are added (default -np)")
    el.add_argument("--host-discovery-script", metavar="SCRIPT",
                    help="executable printing one `host` or `host:slots` per line; run every second")
    el.add_argument("--slots-per-host", "--slots", dest="slots_per_host", type=int,
                    help="slots of a host the discovery script lists without a count (default 1)")
    el.add_argument("--elastic-timeout", type=float,
                    help=f"seconds the job waits with fewer than --min-np workers before it fails "
                         f"(env {TIMEOUT_ENV}, default {DEFAULT_TIMEOUT_S:g})")
    el.add_argument("--reset-limit", type=int, help="fail the job after this many resets (default: no limit)")
    el.add_argument("--blacklist-cooldown-range", type=float, nargs=2, metavar=("MIN", "MAX"),
                    help="a host whose worker failed may return after MIN, 2 MIN, 4 MIN, ... <= MAX seconds "
                         "(with jitter); without it a failed host stays out for good")


ELASTIC_DESTS = ("min_np", "max_np", "host_discovery_script", "slots_per_host", "elastic_timeout", "reset_limit",
                 "blacklist_cooldown_range")


RESET_TIMEOUT_ENV = "PYHOROVOD_ELASTIC_RESET_TIMEOUT_SECONDS"


def reset_timeout_s(env) -> float:
    """How long the other members may take to ask once one asked (elastic_driver.ElasticOptions)."""
    knob = KNOBS[RESET_TIMEOUT_ENV]
    value = knob.read(env)
    return knob.default if value is None else value


def wanted(args: argparse.Namespace) -> bool:
    """Any elastic flag makes the job elastic."""
    return any(getattr(args, d) is not None for d in ELASTIC_DESTS)


def options(args: argparse.Namespace, host_specs: Optional[List[HostSpec]]):
    """(np, min_np, max_np, timeout_s, HostDiscovery) from the flags; ValueError on bad input, before any
    worker runs (the discovery script runs once here: missing, not executable or garbage is an error)."""
    if args.host_discovery_script and host_specs:
        raise ValueError("--host-discovery-script and -H/--hostfile exclude each other: the script lists the hosts")
    slots = args.slots_per_host if args.slots_per_host is not None else 1
    if slots < 1:
        raise ValueError(f"--slots-per-host must be >= 1, got {slots}")
    np = args.np
    if np is None:
        np = args.min_np if args.min_np is not None else None
    if np is None:
        raise ValueError("an elastic job needs -np (the initial number of workers) or --min-np")
    min_np = args.min_np if args.min_np is not None else np
    max_np = args.max_np if args.max_np is not None else max(np, min_np)
    if min_np < 1:
        raise ValueError(f"--min-np must be >= 1, got {min_np}")
    if min_np > max_np:
        raise ValueError(f"--min-np {min_np} is above --max-np {max_np}")
    if not min_np <= np <= max_np:
        raise ValueError(f"-np {np} lies outside --min-np {min_np} .. --max-np {max_np}")
    timeout = args.elastic_timeout
    if timeout is None:
        timeout = KNOBS[TIMEOUT_ENV].read(os.environ)
    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    if timeout <= 0:
        raise ValueError(f"--elastic-timeout must be > 0, got {timeout:g}")
    if args.reset_limit is not None and args.reset_limit < 0:
        raise ValueError(f"--reset-limit must be >= 0, got {args.reset_limit}")
    if args.blacklist_cooldown_range is not None:
        lo, hi = args.blacklist_cooldown_range
        if lo < 0 or hi < lo:
            raise ValueError(f"--blacklist-cooldown-range takes MIN MAX with 0 <= MIN <= MAX, got {lo:g} {hi:g}")
    # No hosts at all: this machine, with a slot for every worker the job may grow to.
    fixed: Dict[str, int] = {h.hostname: h.slots for h in host_specs or [HostSpec("localhost", max_np)]}
    discovery = HostDiscovery(script=args.host_discovery_script, fixed=fixed, default_slots=slots)
    return np, min_np, max_np, timeout, discovery
