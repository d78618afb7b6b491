"""Autotune (HOROVOD_AUTOTUNE=1): during the first training steps, try engine settings and keep the
fastest.

Knobs tuned: the fusion threshold, the cycle time, hierarchical allreduce (automatic, off, on; only when
the job has >= 2 hosts of equal size >= 2) and the ring segment size. A *sample* is
HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE optimizer steps (DistributedOptimizer.step) under one setting, scored
in steps per second as rank 0 measured it; the first HOROVOD_AUTOTUNE_WARMUP_SAMPLES samples (the
starting setting, while caches and buffers warm up) are not scored.

Search: coordinate descent over a fixed grid, one pass -- for each knob in turn, try each of its values
with the other knobs at their best so far, keep the best. Why not Horovod's Bayesian optimisation: with
~20 noisy samples of real training, a Gaussian process over 4 dimensions mostly models noise; the knobs
interact little (fusion and cycle time set how requests are grouped, segments and hierarchy how bytes
move), and a fixed grid walked in a fixed order is reproducible and its log is easy to read. The pass
stops early after HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES scored trials.

Agreement: every rank calls step() the same number of times, so sample boundaries fall on the same step
everywhere. At a boundary rank 0 picks the next setting and broadcasts it (a negotiated collective, after
the step's gradients were synchronized); every rank applies it (Engine.set_knobs) before its next request,
so each collective runs with the same setting on every rank. The log (HOROVOD_AUTOTUNE_LOG, rank 0) is a
CSV with one row per scored trial and a last row, "final", with the setting kept.
"""
import csv
import logging
import time
from typing import Dict, List, Optional

import numpy as np

log = logging.getLogger("pyhorovod")

FIELDS = ["fusion_threshold_bytes", "cycle_time_ms", "hierarchical_allreduce", "segment_bytes"]
GRID: Dict[str, List[float]] = {
    "fusion_threshold_bytes": [0, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 128 << 20],
    "cycle_time_ms": [0.5, 1.0, 2.5, 5.0, 10.0],
    "hierarchical_allreduce": [-1, 0, 1],
    "segment_bytes": [0, 64 << 10, 256 << 10, 1 << 20, 4 << 20],
}


class CoordinateSearch:
    """The trial sequence, a pure function of the scores it is told (unit-tested without an engine)."""

    def __init__(self, start: Dict[str, float], knobs: List[str], max_trials: int):
        self.best = dict(start)
        self.best_score: Optional[float] = None
        self._queue = []  # (knob, value) still to try for the current knob
        self._knobs = list(knobs)
        self.max_trials = max_trials
        self.trials = 0
        self.current = dict(start)  # the setting being measured now (the start first)
        self.done = False

    def report(self, score: float) -> Optional[Dict[str, float]]:
        """Score of `current`; returns the next setting to measure, or None when the search is over (then
        `best` is the setting to keep)."""
        self.trials += 1
        if self.best_score is None or score > self.best_score:
            self.best_score, self.best = score, dict(self.current)
        while not self._queue and self._knobs:
            knob = self._knobs.pop(0)
            self._queue = [(knob, v) for v in GRID[knob] if v != self.best[knob]]
        if not self._queue or self.trials >= self.max_trials:
            self.done = True
            self.current = dict(self.best)
            return None
        knob, value = self._queue.pop(0)
        self.current = dict(self.best, **{knob: value})
        return self.current


class Autotuner:
    def __init__(self, engine, config, rank: int, two_level: bool):
        self.engine, self.rank = engine, rank
        self.steps_per_sample = config.autotune_steps_per_sample
        self.warmup_left = config.autotune_warmup_samples
        self.log_path = config.autotune_log
        start = {"fusion_threshold_bytes": config.fusion_threshold_bytes, "cycle_time_ms": config.cycle_time_ms,
                 "hierarchical_allreduce": config.hierarchical_allreduce, "segment_bytes": config.segment_bytes}
        knobs = [k for k in FIELDS if k != "hierarchical_allreduce" or two_level]
        self.search = CoordinateSearch(start, knobs, config.autotune_max_samples)
        self.applied: List[Dict[str, float]] = []  # every setting applied, in order (tests compare ranks)
        self.rows: List[list] = []
        self.steps = 0
        self.t0 = time.perf_counter()

    def on_step(self) -> None:
        if self.search.done:
            return
        self.steps += 1
        if self.steps < self.steps_per_sample:
            return
        seconds = time.perf_counter() - self.t0
        measured = dict(self.search.current)
        nxt = None
        if self.warmup_left > 0:
            self.warmup_left -= 1
            nxt, scored = measured, False
        else:
            scored = True
            if self.rank == 0:
                nxt = self.search.report(self.steps / seconds)
        # Rank 0's decision travels to every rank: [stop, knob values...].
        vec = np.zeros(1 + len(FIELDS), dtype=np.float64)
        if self.rank == 0:
            choice = nxt if nxt is not None else self.search.best
            vec[:] = [0.0 if nxt is not None else 1.0] + [float(choice[k]) for k in FIELDS]
        from pyhorovod import _numpy_ops
        vec = _numpy_ops.broadcast(vec, 0, name="pyhorovod.autotune")
        choice = {k: vec[1 + i] for i, k in enumerate(FIELDS)}
        if scored:
            self.rows.append([len(self.rows) + 1] + [measured[k] for k in FIELDS] + [self.steps, seconds,
                                                                                    self.steps / seconds])
        self.search.current = dict(choice)
        self._apply(choice)
        if vec[0] == 1.0:
            self.search.done = True
            self.search.best = dict(choice)
            self._write_log(choice)
            log.info("pyhorovod autotune: kept %s", {k: choice[k] for k in FIELDS})
        self.steps = 0
        self.t0 = time.perf_counter()

    def _apply(self, s: Dict[str, float]) -> None:
        self.applied.append(dict(s))
        self.engine.set_knobs(fusion_threshold_bytes=int(s["fusion_threshold_bytes"]),
                              cycle_time_ms=float(s["cycle_time_ms"]),
                              hierarchical_allreduce=int(s["hierarchical_allreduce"]),
                              segment_bytes=int(s["segment_bytes"]))

    def _write_log(self, final: Dict[str, float]) -> None:
        if self.rank != 0 or not self.log_path:
            return
        with open(self.log_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["trial"] + FIELDS + ["steps", "seconds", "steps_per_second"])
            w.writerows(self.rows)
            w.writerow(["final"] + [final[k] for k in FIELDS] + ["", "", ""])


_tuner: Optional[Autotuner] = None
_tuner_engine = None


def on_step() -> None:
    """Called by DistributedOptimizer.step() after the gradients are synchronized; no-op unless enabled."""
    global _tuner, _tuner_engine
    from pyhorovod import basics
    state = basics._state
    if state.engine is None or state.config is None or not state.config.autotune:
        return
    if _tuner is None or _tuner_engine is not state.engine:
        h = state.engine.hierarchy()
        hosts = h["host_of"]
        two_level = bool(hosts) and len(set(hosts)) >= 2 and len(set(hosts.count(x) for x in set(hosts))) == 1 \
            and hosts.count(hosts[0]) >= 2
        _tuner, _tuner_engine = Autotuner(state.engine, state.config, state.info.rank, two_level), state.engine
    _tuner.on_step()


def current() -> Optional[Autotuner]:
    """The running job's tuner (None before the first step or without autotune)."""
    return _tuner
