"""Hosts an elastic job stops using after a worker there failed.

Without a cooldown range a blacklisted host stays out for the rest of the job (as Horovod). With
`--blacklist-cooldown-range MIN MAX` it returns after a cooldown that doubles with each failure of that
host, MIN, 2 MIN, 4 MIN, ... capped at MAX seconds, then multiplied by a random factor in [0.8, 1.2]
(jitter: hosts that failed together do not all return in the same second).
"""
from __future__ import annotations

import random
import time
from typing import Callable, Dict, Optional, Tuple


class Blacklist:
    def __init__(self, cooldown_range: Optional[Tuple[float, float]] = None,
                 clock: Callable[[], float] = time.monotonic, rng: Optional[random.Random] = None):
        if cooldown_range is not None:
            lo, hi = cooldown_range
            if lo < 0 or hi < lo:
                raise ValueError(f"--blacklist-cooldown-range takes MIN MAX with 0 <= MIN <= MAX, got {lo} {hi}")
        self._range = cooldown_range
        self._clock = clock
        self._rng = rng or random.Random()
        self._failures: Dict[str, int] = {}
        self._until: Dict[str, float] = {}   # host -> when it may return (inf: never)

    def add(self, host: str) -> float:
        """Records a failure of host; returns the cooldown in seconds (inf: for good)."""
        n = self._failures.get(host, 0) + 1
        self._failures[host] = n
        if self._range is None:
            cooldown = float("inf")
        else:
            lo, hi = self._range
            cooldown = min(hi, lo * 2 ** (n - 1)) * self._rng.uniform(0.8, 1.2)
        self._until[host] = self._clock() + cooldown
        return cooldown

    def blocked(self, host: str) -> bool:
        until = self._until.get(host)
        return until is not None and self._clock() < until

    def failures(self, host: str) -> int:
        return self._failures.get(host, 0)

    def permanent(self) -> bool:
        return self._range is None
