"""Throughput of a data-parallel job at each worker count: measured where the job ran, modelled elsewhere.

Terms. n workers each take b examples per step (the local batch, accumulated micro-batches included), so
the global batch is n b and the throughput n b / T(n) examples per second, with T(n) the step time.

Model of T(n), for counts the job has not run at:

    T(n) = t_c x s(n) + T_ring(M, n)

  t_c     compute seconds of one step on a worker with a core of its own: measured (the step time minus
          the time spent waiting for the allreduce, at any count), so per example t_c / b;
  s(n)    slow-down from oversubscription: the n ranks are placed on the hosts in order, filling each
          host's slots; a host with r ranks and c cores runs them r / c times slower when r > c (they
          share the cores), and a synchronous step waits for the slowest host: s(n) = max_h max(1, r_h/c_h);
  T_ring  the ring allreduce of the M gradient bytes, 2(n-1) alpha + 2(n-1)/n M/beta (cost_model.py),
          alpha and beta fitted to the job's own allreduce times once it has run at two or more counts
          above one (before that, `network`, the caller's guess).

Correction. Wherever the job has run, its median measured step time is used as it is. For the other
counts the model is multiplied by the median of measured / modelled over the counts measured so far, so
a model that is consistently optimistic (framework overhead, slower cores) is corrected as soon as the
first measurement arrives, and refined by later ones.

A count the hosts cannot give (more ranks than slots in all) has no throughput: `throughput` returns
None, and the autoscaler never chooses it.
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from .cost_model import Network, fit_ring, ring_allreduce_time

# A first guess for links between local processes (TCP over loopback / shared memory): 50 us per message,
# 1 GB/s. Replaced by the fit to the job's own allreduce times as soon as there are two counts to fit.
DEFAULT_NETWORK = Network(alpha_s=50e-6, beta_bytes_per_s=1e9)


@dataclass(frozen=True)
class Host:
    """One host of the job: `slots` ranks it may run, `cores` CPU cores (or accelerators) for them."""
    name: str
    slots: int
    cores: int

    def __post_init__(self):
        if self.slots < 0 or self.cores < 1:
            raise ValueError(f"host {self.name!r}: need slots >= 0 and cores >= 1, got {self.slots}, "
                             f"{self.cores}")


def placement(n: int, hosts: Sequence[Host]) -> Optional[List[int]]:
    """Ranks per host when n ranks fill the hosts' slots in order; None when the slots do not suffice."""
    left, out = n, []
    for h in hosts:
        take = min(left, h.slots)
        out.append(take)
        left -= take
    return None if left > 0 else out


def oversubscription(n: int, hosts: Sequence[Host]) -> Optional[float]:
    """s(n) of the module doc: how much slower each step's compute runs at n ranks; None if impossible."""
    ranks = placement(n, hosts)
    if ranks is None:
        return None
    return max([1.0] + [r / h.cores for r, h in zip(ranks, hosts) if r])


class ThroughputModel:
    """Measured and modelled throughput per worker count (module doc).

    hosts: the hosts the job may use; local_batch: b; grad_bytes: M (bytes allreduced per step);
    network: the alpha-beta guess used until the job's own times can be fitted; window: measurements
    kept per count.
    """

    def __init__(self, hosts: Sequence[Host], local_batch: int, grad_bytes: float,
                 network: Network = DEFAULT_NETWORK, window: int = 200):
        if not hosts:
            raise ValueError("the throughput model needs at least one host")
        if local_batch < 1 or grad_bytes < 0:
            raise ValueError(f"need local_batch >= 1 and grad_bytes >= 0, got {local_batch}, {grad_bytes}")
        self.hosts = list(hosts)
        self.local_batch = int(local_batch)
        self.grad_bytes = float(grad_bytes)
        self.network = network
        self._step = defaultdict(lambda: deque(maxlen=window))      # n -> step seconds
        self._sync = defaultdict(lambda: deque(maxlen=window))      # n -> seconds waiting on the allreduce
        self._compute = deque(maxlen=window)                        # t_c / s(n), normalised to one core
        self._prior_correction = 1.0                                # correction() before any measurement

    @property
    def max_workers(self) -> int:
        return sum(h.slots for h in self.hosts)

    def observe(self, n: int, step_s: float, sync_s: float = 0.0) -> None:
        """One step of the job at n workers: its wall time and the part spent waiting on communication."""
        if not (step_s > 0 and 0 <= sync_s <= step_s):
            raise ValueError(f"need step_s > 0 and 0 <= sync_s <= step_s, got {step_s}, {sync_s}")
        s = oversubscription(n, self.hosts)
        if s is None:
            raise ValueError(f"a step at {n} workers, more than the hosts' {self.max_workers} slots")
        self._step[n].append(step_s)
        self._sync[n].append(sync_s)
        self._compute.append((step_s - sync_s) / s)

    def measured_counts(self) -> List[int]:
        return sorted(self._step)

    def fitted_network(self) -> Network:
        """alpha, beta fitted to the median allreduce waits at >= 2 measured counts above one, else the
        guess. A wait of zero (fully overlapped communication) says nothing about the link: skipped."""
        points = [(n, self.grad_bytes, float(np.median(w))) for n, w in sorted(self._sync.items())
                  if n >= 2 and w and np.median(w) > 0]
        if len({p[0] for p in points}) < 2 or self.grad_bytes <= 0:
            return self.network
        return fit_ring(points)[0]

    def modelled_step_s(self, n: int) -> Optional[float]:
        """T(n) from the model alone (uncorrected); None if n is impossible or nothing was measured."""
        s = oversubscription(n, self.hosts)
        if s is None or not self._compute:
            return None
        t_c = float(np.median(self._compute))
        return t_c * s + ring_allreduce_time(self.grad_bytes, n, self.fitted_network())

    def correction(self) -> float:
        """Median of measured / modelled step time over the measured counts (1 before any)."""
        ratios = [float(np.median(self._step[n])) / self.modelled_step_s(n) for n in self.measured_counts()]
        return float(np.median(ratios)) if ratios else self._prior_correction

    def step_s(self, n: int) -> Optional[float]:
        """The step time at n workers: measured if the job ran there, else the corrected model."""
        if oversubscription(n, self.hosts) is None:
            return None
        if self._step.get(n):
            return float(np.median(self._step[n]))
        t = self.modelled_step_s(n)
        return None if t is None else t * self.correction()

    def throughput(self, n: int) -> Optional[float]:
        """Examples per second at n workers; None for a count the hosts cannot give (or no data yet)."""
        t = self.step_s(n)
        return None if t is None else n * self.local_batch / t

    def what_if(self, hosts: Sequence[Host]) -> "ThroughputModel":
        """The same job on other hosts: a model keeping the measured compute per core, the allreduce waits
        (so the fitted link) and the correction, but none of the step times (they belong to these hosts)."""
        other = ThroughputModel(hosts, self.local_batch, self.grad_bytes, self.network)
        other._compute.extend(self._compute)
        for n, waits in self._sync.items():
            other._sync[n].extend(waits)
        other._prior_correction = self.correction()
        return other

    def table(self, counts: Sequence[int]) -> Dict[int, dict]:
        """Per count: step time, throughput, whether it was measured, and the oversubscription s(n)."""
        return {n: {"step_s": self.step_s(n), "throughput": self.throughput(n),
                    "measured": bool(self._step.get(n)), "oversubscription": oversubscription(n, self.hosts)}
                for n in counts}
