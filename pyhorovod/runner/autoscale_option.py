"""Autoscaling settings (`pyhorovod run --autoscale goodput --min-np A --max-np B ...`, or the Ray elastic
executor's `autoscale="goodput"`): one validation and one environment for the workers, whichever front end.

A front end turns its flags or keywords into an `AutoscaleSpec` (`from_args` for the launcher's argparse
Namespace; pyhorovod/ray/autoscale.py for Ray), with `names`: how that front end spells each setting, so
that an error names the parameter the user wrote. `validate(spec)` raises ValueError before any worker
starts; for an elastic job, `worker_env(spec, host_slots, host_cores)` is merged into every worker's
environment, and rank 0's Autoscaler (pyhorovod/elastic/autoscaler.py) reads its settings from there.
Nothing else changes in the driver: rank 0 asks for a size through the store key it already watches.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Dict, Mapping, Optional, Union

from pyhorovod.elastic import autoscaler as A

POLICIES = ("goodput",)
# The advisor's EMA horizon in examples (benchmarks/RESULTS.md, "Live B_simple against exact values"):
# ~0.4 epoch of Fashion-MNIST; at 2-4 workers of 64 it is 100-200 steps, where the live value stays within
# 5% of the exact EMA; a horizon in examples keeps that span across resizes.
DEFAULT_HORIZON_EXAMPLES = 25600

# How the launcher spells each setting (its errors name the flag). "policy" is a format of the value.
CLI_NAMES = {"policy": "--autoscale {}", "min_np": "--min-np", "max_np": "--max-np", "every": "--autoscale-every",
             "margin": "--autoscale-margin", "trace": "--autoscale-trace",
             "cores_per_host": "--autoscale-cores-per-host"}


@dataclasses.dataclass(frozen=True)
class AutoscaleSpec:
    """policy: "goodput", or None (no autoscaling; the other fields are then unused). min_np, max_np: the
    range the job may move in. every: optimizer steps between evaluations; margin: the fraction a count
    must beat the current one by (twice in a row); trace: path prefix of rank 0's CSV/PNG, or None;
    cores_per_host: cores of every host for the oversubscription model, or None (each host's own count:
    `worker_env`'s host_cores, else this machine's). names: the front end's spelling of each field."""
    policy: Optional[str]
    min_np: Optional[int]
    max_np: Optional[int]
    every: int = 50
    margin: float = 0.10
    trace: Optional[str] = None
    cores_per_host: Optional[int] = None
    names: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(CLI_NAMES))

    @property
    def enabled(self) -> bool:
        return self.policy is not None


def add_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("autoscaling (an elastic job that picks its own size)")
    g.add_argument("--autoscale", choices=POLICIES,
                   help="goodput: rank 0 grows or shrinks the job within --min-np..--max-np to the worker count "
                        "of the highest throughput x statistical efficiency (needs measure_noise_scale=True)")
    g.add_argument("--autoscale-every", type=int, default=50, metavar="STEPS",
                   help="optimizer steps between evaluations (default 50)")
    g.add_argument("--autoscale-margin", type=float, default=0.10, metavar="FRACTION",
                   help="a count must beat the current one by more than this twice in a row (default 0.10)")
    g.add_argument("--autoscale-trace", metavar="PREFIX", help="rank 0 writes PREFIX.csv and PREFIX.png")
    g.add_argument("--autoscale-cores-per-host", type=int, metavar="N",
                   help="cores of each host, for the oversubscription model (default: this machine's)")


def from_args(args: argparse.Namespace) -> AutoscaleSpec:
    """The launcher's flags (add_flags, and its --min-np/--max-np) as a spec."""
    return AutoscaleSpec(getattr(args, "autoscale", None), getattr(args, "min_np", None),
                         getattr(args, "max_np", None), getattr(args, "autoscale_every", 50),
                         getattr(args, "autoscale_margin", 0.10), getattr(args, "autoscale_trace", None),
                         getattr(args, "autoscale_cores_per_host", None))


def _spec(settings: Union[AutoscaleSpec, argparse.Namespace]) -> AutoscaleSpec:
    return settings if isinstance(settings, AutoscaleSpec) else from_args(settings)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate(spec: AutoscaleSpec) -> None:
    """ValueError for bad autoscaling settings, naming the parameter in the front end's spelling."""
    if not spec.enabled:
        return
    name = spec.names
    policy = name["policy"].format(spec.policy)
    if spec.policy not in POLICIES:
        raise ValueError(f"{policy}: the policy must be one of {', '.join(POLICIES)}")
    if spec.min_np is None or spec.max_np is None:
        raise ValueError(f"{policy} needs {name['min_np']} and {name['max_np']} (the range the job may move in)")
    if not _is_int(spec.every) or spec.every < 1:
        raise ValueError(f"{name['every']} must be an int >= 1, got {spec.every!r}")
    if isinstance(spec.margin, bool) or not isinstance(spec.margin, (int, float)) or not 0 <= spec.margin < 10:
        raise ValueError(f"{name['margin']} is a fraction (0.1 = 10%), got {spec.margin!r}")
    if spec.cores_per_host is not None and (not _is_int(spec.cores_per_host) or spec.cores_per_host < 1):
        raise ValueError(f"{name['cores_per_host']} must be an int >= 1, got {spec.cores_per_host!r}")
    if spec.trace is not None and not isinstance(spec.trace, (str, os.PathLike)):
        raise ValueError(f"{name['trace']} must be a path prefix, got {spec.trace!r}")


def check(settings: Union[AutoscaleSpec, argparse.Namespace]) -> None:
    """validate() of a spec or of the launcher's parsed flags."""
    validate(_spec(settings))


def worker_env(settings: Union[AutoscaleSpec, argparse.Namespace], host_slots: Optional[Mapping[str, int]] = None,
               host_cores: Optional[Mapping[str, int]] = None) -> Dict[str, str]:
    """The environment rank 0's Autoscaler reads; {} without autoscaling. host_slots: host -> slots the
    job may use (default: this host with max_np slots); host_cores: host -> its cores (Ray's resources),
    used unless the spec's cores_per_host is set; a host missing from it counts this machine's cores."""
    spec = _spec(settings)
    validate(spec)
    if not spec.enabled:
        return {}
    cores = host_cores or {}
    slots = dict(host_slots) if host_slots else {"localhost": spec.max_np}

    def cores_of(host):
        return spec.cores_per_host or cores.get(host) or os.cpu_count() or 1
    env = {A.ENV: spec.policy, A.ENV_MIN: str(spec.min_np), A.ENV_MAX: str(spec.max_np),
           A.ENV_EVERY: str(spec.every), A.ENV_MARGIN: repr(float(spec.margin)),
           A.ENV_HOSTS: ",".join(f"{h}:{s}:{cores_of(h)}" for h, s in slots.items()),
           "PYHOROVOD_NOISE_SCALE_HORIZON": os.environ.get("PYHOROVOD_NOISE_SCALE_HORIZON",
                                                           str(DEFAULT_HORIZON_EXAMPLES))}
    if spec.trace:
        env[A.ENV_TRACE] = os.path.abspath(os.fspath(spec.trace))
    return env
