"""Autoscaling of an elastic job on Ray: `pyhorovod run --autoscale goodput`'s option in the Ray executors.

    settings = ElasticRayExecutor.create_settings(min_num_proc=1, max_num_proc=3, autoscale="goodput",
                                                  autoscale_every=50, autoscale_margin=0.10,
                                                  autoscale_trace="/tmp/trace", autoscale_cores_per_host=None)
    RayExecutor(settings, min_workers=1, max_workers=3, autoscale="goodput", ...)   # the executor's elastic mode

The keywords sit with the job's other size settings (min/max count) rather than in run(): like those,
they are fixed for the life of the executor and checked before anything starts. The validation and the
workers' environment are the launcher's (runner/autoscale_option.py); only the spelling in the errors
differs. The hosts the autoscaler's throughput model sees are Ray's nodes: slots from the discovery
(discovery.RayHostDiscovery, the elastic driver's), cores from each node's CPU resource unless
autoscale_cores_per_host says otherwise. An autoscaled job starts at min_num_proc workers (a plain
elastic job starts with as many as the nodes hold): growing is the autoscaler's decision. The trace path
is on the node rank 0 runs on.
"""
from __future__ import annotations

from typing import Dict, Optional

from pyhorovod.runner import autoscale_option
from pyhorovod.runner.autoscale_option import AutoscaleSpec

# ElasticRayExecutor.create_settings's keywords, and RayExecutor's names of the count range.
ELASTIC_NAMES = {"policy": "autoscale={!r}", "min_np": "min_num_proc", "max_np": "max_num_proc",
                 "every": "autoscale_every", "margin": "autoscale_margin", "trace": "autoscale_trace",
                 "cores_per_host": "autoscale_cores_per_host"}
EXECUTOR_NAMES = dict(ELASTIC_NAMES, min_np="min_workers", max_np="max_workers")


def spec(autoscale: Optional[str], min_np: Optional[int], max_np: Optional[int], every: int = 50,
         margin: float = 0.10, trace: Optional[str] = None, cores_per_host: Optional[int] = None,
         names: Optional[Dict[str, str]] = None) -> Optional[AutoscaleSpec]:
    """The validated spec of the keywords; None when autoscale is None (a plain elastic job)."""
    if autoscale is None:
        return None
    s = AutoscaleSpec(autoscale, min_np, max_np, every, margin, trace, cores_per_host, names or ELASTIC_NAMES)
    autoscale_option.validate(s)
    return s


def worker_env(s: Optional[AutoscaleSpec], discovery) -> Dict[str, str]:
    """The autoscaler's environment for the workers ({} for a plain elastic job), with Ray's nodes as hosts."""
    if s is None:
        return {}
    return autoscale_option.worker_env(s, discovery.current(), discovery.cores())
