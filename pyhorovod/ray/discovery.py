"""Ray's nodes as host discovery: which hosts the cluster has now and how many workers ("slots") each
can hold, for an elastic job whose hosts come and go with Ray's nodes.

The answer has the shape of a host discovery script's output (hostname -> slots); hostnames are those
RayExecutor gives its ranks (placement.node_hostnames), so one node is one host in both. A node's slots
are counted from its total resources (not the free ones: the job's own workers hold some), and nodes
that are not alive, or cannot hold one worker, are left out.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Dict, Optional

import ray

from .placement import node_hostnames


class RayHostDiscovery:
    """find_available_hosts_and_slots() -> {hostname: slots}; node_id(hostname) -> the Ray node id, so
    that a worker meant for a host can be pinned to its node. current() and close(): the interface of the
    elastic driver's discovery (runner/discovery.HostDiscovery); current() asks Ray at most every
    interval_s (the driver asks several times a tick)."""

    def __init__(self, use_gpu: bool = False, cpus_per_slot: float = 1, gpus_per_slot: Optional[float] = None,
                 interval_s: float = 0.5):
        self.cpus_per_slot = cpus_per_slot
        self.gpus_per_slot = (gpus_per_slot or 1) if use_gpu else 0
        self.interval_s = interval_s
        self._node_of: Dict[str, str] = {}
        self._cores_of: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._cached: Optional[Dict[str, int]] = None
        self._asked_at = 0.0

    def slots_of(self, resources: Dict[str, float]) -> int:
        counts = []
        for name, per_slot in (("CPU", self.cpus_per_slot), ("GPU", self.gpus_per_slot)):
            if per_slot:
                # a little slack: Ray keeps fractional resources in units of 1e-4
                counts.append(math.floor(resources.get(name, 0.0) / per_slot + 1e-6))
        return min(counts) if counts else 1

    def find_available_hosts_and_slots(self) -> Dict[str, int]:
        alive = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        names = node_hostnames({node: n["NodeManagerAddress"] for node, n in alive.items()})
        hosts = {}
        for node, n in alive.items():
            slots = self.slots_of(n.get("Resources", {}))
            if slots > 0:
                hosts[names[node]] = slots
                self._node_of[names[node]] = node
                # Ray's CPU count of the node (at least 1: a GPU node may declare none)
                self._cores_of[names[node]] = max(1, int(n.get("Resources", {}).get("CPU", 0)))
        return hosts

    def node_id(self, hostname: str) -> Optional[str]:
        return self._node_of.get(hostname)

    def cores(self) -> Dict[str, int]:
        """hostname -> CPU cores Ray gives the node, for the hosts current() has listed (the autoscaler's
        oversubscription model)."""
        self.current()
        with self._lock:
            return dict(self._cores_of)

    dynamic = True   # nodes come and go (runner/discovery.HostDiscovery's flag)

    def current(self) -> Dict[str, int]:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._asked_at >= self.interval_s:
                self._cached = self.find_available_hosts_and_slots()
                self._asked_at = now
            return dict(self._cached)

    def close(self) -> None:
        pass
