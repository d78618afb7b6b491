"""Where the workers go: the placement group the executor reserves, the error when the cluster cannot hold
it, and the rank order of the placed workers.

A *bundle* is one set of resources Ray reserves together on one node. Two layouts:
  - num_workers alone: one bundle per worker, strategy SPREAD (Ray spreads them over the nodes as it can);
  - num_hosts x num_workers_per_host: one bundle per host holding all of that host's workers, strategy
    STRICT_SPREAD (every host bundle on a different node); the host's workers share its bundle.
Ranks are then ordered by node (the nodes in the order of their first bundle), so that the ranks of one
node are consecutive and local/cross ranks follow as under `pyhorovod run` (runner/hosts.assign_slots).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import ray
from ray.util.placement_group import placement_group, remove_placement_group

from pyhorovod.runner.hosts import HostSpec, SlotInfo, assign_slots


@dataclasses.dataclass(frozen=True)
class Layout:
    bundles: List[Dict[str, float]]
    strategy: str
    workers_per_bundle: int

    @property
    def num_workers(self) -> int:
        return len(self.bundles) * self.workers_per_bundle

    def describe(self) -> str:
        what = "workers" if self.workers_per_bundle == 1 else f"hosts of {self.workers_per_bundle} workers"
        return f"{len(self.bundles)} {what}, bundle {_fmt(self.bundles[0])} each, {self.strategy}"


def _fmt(resources: Dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items())) + "}"


def worker_resources(cpus_per_worker: float, gpus_per_worker: float) -> Dict[str, float]:
    res = {"CPU": float(cpus_per_worker)}
    if gpus_per_worker:
        res["GPU"] = float(gpus_per_worker)
    return {k: v for k, v in res.items() if v > 0}


def layout(num_workers: Optional[int], num_hosts: Optional[int], per_host: int,
           per_worker: Dict[str, float]) -> Layout:
    if num_hosts is None:
        return Layout([dict(per_worker) for _ in range(num_workers)], "SPREAD", 1)
    host = {k: v * per_host for k, v in per_worker.items()}
    return Layout([host for _ in range(num_hosts)], "STRICT_SPREAD", per_host)


def reserve(plan: Layout, timeout_s: float):
    """The placement group of the layout, ready; TimeoutError naming what the cluster lacks when Ray has
    not placed it within timeout_s (the group is removed again)."""
    # A bundle without resources is refused by Ray: workers of 0 CPUs still hold a tiny share of one.
    bundles = [b or {"CPU": 0.001} for b in plan.bundles]
    pg = placement_group(bundles, strategy=plan.strategy)
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if ready:
        return pg
    remove_placement_group(pg)
    raise TimeoutError(f"RayExecutor.start: Ray did not place the workers ({plan.describe()}) within "
                       f"{timeout_s:g} s: {shortfall(bundles, plan.strategy)}")


def shortfall(bundles: Sequence[Dict[str, float]], strategy: str) -> str:
    """What keeps the cluster from holding the bundles, in words."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    total = ray.cluster_resources()
    needed: Dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            needed[k] = needed.get(k, 0.0) + v
    lacking = [f"{k} {v:g} needed, the cluster has {total.get(k, 0.0):g}" for k, v in sorted(needed.items())
               if total.get(k, 0.0) < v]
    if lacking:
        return "; ".join(lacking)
    fits = sum(1 for res in nodes if all(res.get(k, 0.0) >= v for k, v in bundles[0].items()))
    if fits == 0:
        return f"no node has {_fmt(bundles[0])} (nodes: {', '.join(_fmt(r) for r in nodes)})"
    if strategy == "STRICT_SPREAD" and fits < len(bundles):
        return (f"{len(bundles)} hosts asked for, but only {fits} node(s) can hold a host's bundle "
                f"{_fmt(bundles[0])}")
    free = ray.available_resources()
    return (f"the cluster has the resources but not free (available now: {_fmt(free)}); other tasks, actors "
            f"or placement groups hold them")


def node_hostnames(ip_of: Dict[str, str]) -> Dict[str, str]:
    """Node id -> the hostname pyhorovod gives the node: its IP, or IP/node id where nodes share an IP
    (several raylets on one machine), so that two nodes are never taken for one host."""
    ips = list(ip_of.values())
    return {n: ip if ips.count(ip) == 1 else f"{ip}/{n[:12]}" for n, ip in ip_of.items()}


def assign_ranks(locations: Sequence[Tuple[str, str]]) -> Tuple[List[int], List[SlotInfo]]:
    """locations[i]: (node id, node IP) of worker i, in bundle order. Returns (order, slots): order[rank] is
    the worker that takes that rank, slots[rank] its coordinates. The hostname of a node is its IP, or IP
    plus node id where several nodes share an IP (several raylets on one machine)."""
    node_order = list(dict.fromkeys(node for node, _ in locations))
    name = node_hostnames(dict(locations))
    by_node = {n: [i for i, (node, _) in enumerate(locations) if node == n] for n in node_order}
    order = [i for n in node_order for i in by_node[n]]
    slots = assign_slots([HostSpec(name[n], len(by_node[n])) for n in node_order], len(locations))
    return order, slots
