"""Forming one generation of an elastic job: which worker gets which rank.

Rules (so that `state.sync()`, a broadcast from rank 0, always spreads trained state):
  * survivors keep their relative order, and rank 0 is a survivor whenever there is one;
  * the ranks of a host stay together: hosts are ordered by the lowest previous rank among their
    workers (hosts new to the job last, in the order their workers started), and within a host the
    survivors come first by previous rank, then the new workers by start order;
  * local and cross ranks follow from the hosts (hosts.slots_for).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from .hosts import slots_for


@dataclass
class Member:
    worker_id: str
    hostname: str
    prev_rank: Optional[int]   # its rank in the previous generation; None for a worker new to the job
    seq: int                   # start order of the worker (unique)


def order(members: Sequence[Member]) -> List[Member]:
    inf = float("inf")

    def host_key(host: str):
        on_host = [m for m in members if m.hostname == host]
        survivors = [m.prev_rank for m in on_host if m.prev_rank is not None]
        return (0, min(survivors)) if survivors else (1, min(m.seq for m in on_host))

    hosts = sorted({m.hostname for m in members}, key=host_key)
    out: List[Member] = []
    for host in hosts:
        out.extend(sorted((m for m in members if m.hostname == host),
                          key=lambda m: (inf if m.prev_rank is None else m.prev_rank, m.seq)))
    return out


def records(gen: int, ordered: Sequence[Member], hosts_version: int = 0) -> Dict[str, dict]:
    """worker id -> the assignment record of pyhorovod/elastic/_membership.py."""
    slots = slots_for([m.hostname for m in ordered])
    per_host = [s.local_size for s in slots]
    homogeneous = len(set(per_host)) <= 1
    return {m.worker_id: {"gen": gen, "rank": s.rank, "size": s.size, "local_rank": s.local_rank,
                          "local_size": s.local_size, "cross_rank": s.cross_rank, "cross_size": s.cross_size,
                          "hostname": s.hostname, "homogeneous": homogeneous,
                          "hosts_version": hosts_version}
            for m, s in zip(ordered, slots)}
