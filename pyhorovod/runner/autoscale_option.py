"""`pyhorovod run --autoscale goodput --min-np A --max-np B ...`: the flags and what workers get from them.

The launcher adds the flags with `add_flags(parser)` and, for an elastic job, merges
`worker_env(args, hosts)` into every worker's environment; rank 0's Autoscaler
(pyhorovod/elastic/autoscaler.py) reads its settings from there. Nothing else changes in the driver:
rank 0 asks for a size through the store key it already watches.
"""
from __future__ import annotations

import argparse
import os
from typing import Dict, Mapping, Optional

from pyhorovod.elastic import autoscaler as A

POLICIES = ("goodput",)
# The advisor's EMA horizon in examples (benchmarks/RESULTS.md, "Live B_simple against exact values"):
# ~0.4 epoch of Fashion-MNIST; at 2-4 workers of 64 it is 100-200 steps, where the live value stays within
# 5% of the exact EMA; a horizon in examples keeps that span across resizes.
DEFAULT_HORIZON_EXAMPLES = 25600


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


def check(args: argparse.Namespace) -> None:
    """ValueError for bad autoscaling flags, before any worker starts."""
    if getattr(args, "autoscale", None) is None:
        return
    if args.min_np is None or args.max_np is None:
        raise ValueError("--autoscale goodput needs --min-np and --max-np (the range the job may move in)")
    if args.autoscale_every < 1:
        raise ValueError(f"--autoscale-every must be >= 1, got {args.autoscale_every}")
    if not 0 <= args.autoscale_margin < 10:
        raise ValueError(f"--autoscale-margin is a fraction (0.1 = 10%), got {args.autoscale_margin}")
    if args.autoscale_cores_per_host is not None and args.autoscale_cores_per_host < 1:
        raise ValueError(f"--autoscale-cores-per-host must be >= 1, got {args.autoscale_cores_per_host}")


def worker_env(args: argparse.Namespace, host_slots: Optional[Mapping[str, int]] = None) -> Dict[str, str]:
    """The environment rank 0's Autoscaler reads; {} without --autoscale. host_slots: host -> slots the
    job may use (default: this host with --max-np slots)."""
    check(args)
    if getattr(args, "autoscale", None) is None:
        return {}
    cores = args.autoscale_cores_per_host or os.cpu_count() or 1
    slots = dict(host_slots) if host_slots else {"localhost": args.max_np}
    env = {A.ENV: args.autoscale, A.ENV_MIN: str(args.min_np), A.ENV_MAX: str(args.max_np),
           A.ENV_EVERY: str(args.autoscale_every), A.ENV_MARGIN: repr(args.autoscale_margin),
           A.ENV_HOSTS: ",".join(f"{h}:{s}:{cores}" for h, s in slots.items()),
           "PYHOROVOD_NOISE_SCALE_HORIZON": os.environ.get("PYHOROVOD_NOISE_SCALE_HORIZON",
                                                           str(DEFAULT_HORIZON_EXAMPLES))}
    if args.autoscale_trace:
        env[A.ENV_TRACE] = os.path.abspath(args.autoscale_trace)
    return env
