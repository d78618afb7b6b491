"""When to grow or shrink an elastic job: the worker count of the highest predicted goodput.

Terms (docs/scaling.md; Pollux, Qiao et al. 2021; McCandlish et al. 2018). At n workers of local
batch b the global batch is B(n) = n b. To reach a target, training at batch B takes S(B) = S_min (1 +
B_noise/B) steps, B_noise estimated live by B_simple. The progress of one second at n workers, relative
to the current count n0, is

    goodput(n) = throughput(n) x efficiency(B(n)),   efficiency(B) = (B_noise + B(n0)) / (B_noise + B)

(throughput in examples per second; `advisor.efficiency`). Written per step instead of per example it
is steps/s x (1 + B_noise/B(n0)) / (1 + B_noise/B): the same ratio between counts. So more workers pay
while B(n) is small against B_noise (each example is worth nearly as much) and the throughput still
scales; once B(n) passes B_noise, or the throughput flattens, fewer workers make as much progress.

The decision (pure: no I/O; the caller feeds measurements and acts on the answer). Every evaluation
ranks the counts in [min_np, max_np] the hosts can give (throughput.py) by goodput. The job is asked to
move to the best count only when that same count beats the current one by more than `margin` (default
10%) on `patience` (default 2) evaluations in a row; any evaluation that does not confirms nothing, and
a resize starts the count over. Estimator noise of a few percent cannot then make the job flap between
two counts of nearly equal goodput.

Across resizes. A resize costs seconds of every worker's time (new workers start, all re-form), and the
first measurements at a new count are few and noisy. So after each resize the count holds for `dwell`
evaluations (default 3), and going back to the count the job has just left needs twice the margin: a
job whose two counts predict goodputs within the noise of the measurements settles instead of
oscillating between them.

Resize cost. A confirmed move is made only when it pays for its pause: with R seconds of training left
at the current count (the caller's `remaining_s`), a count of relative goodput g > 1 finishes the same
work in R/g, saving R (1 - 1/g) seconds; the move is made when that saving exceeds P, the pause of a
resize. P is measured from the job's own resizes (`observe_pause`: from the decision to the first step
at the new size; the median of those so far), and before the first one is DEFAULT_RESIZE_PAUSE_S. The
measured P is an upper bound of the cost: the running workers keep training through most of it (the
newcomers' start-up). When the remaining time is unknown (remaining_s None: a job without a step or time
budget it tells the autoscaler) the rule cannot be evaluated and is skipped: the margin and the
confirmations alone decide, as before the rule.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .advisor import efficiency
from .throughput import ThroughputModel

# The pause of a resize before the job has made one: the elastic benchmark's host added to the new
# worker's first step, 8.9 s median (benchmarks/RESULTS.md, elastic section: a new worker's imports of torch
# and pyhorovod dominate), rounded up.
DEFAULT_RESIZE_PAUSE_S = 10.0


@dataclass
class Decision:
    """One evaluation. target_np: the count to move to now, or None to stay. best_np: the candidate of
    the highest goodput this time (moved to only once confirmed). goodput: count -> predicted goodput
    relative to the current count's (1.0 = the current one)."""
    step: int
    current_np: int
    b_noise: float
    best_np: int
    gain: float
    target_np: Optional[int]
    goodput: Dict[int, float] = field(default_factory=dict)
    reason: str = ""
    remaining_s: Optional[float] = None   # the resize-cost rule's inputs (None: remaining time unknown)
    pause_s: Optional[float] = None


class GoodputAutoscaler:
    """The decision logic of `pyhorovod run --autoscale goodput` (module doc).

    model: the ThroughputModel of the job; min_np, max_np: the bounds of the count; margin, patience:
    the hysteresis. evaluate() is called every N steps (the caller's choice) with the current count and
    the live B_simple. resize_pause_s: the pause assumed before observe_pause() has measured one.
    """

    def __init__(self, model: ThroughputModel, min_np: int, max_np: int, margin: float = 0.10,
                 patience: int = 2, dwell: int = 3, resize_pause_s: float = DEFAULT_RESIZE_PAUSE_S):
        if not 1 <= min_np <= max_np:
            raise ValueError(f"need 1 <= min_np <= max_np, got min_np={min_np}, max_np={max_np}")
        if margin < 0 or patience < 1 or dwell < 0:
            raise ValueError(f"need margin >= 0, patience >= 1 and dwell >= 0, got {margin}, {patience}, {dwell}")
        if not resize_pause_s >= 0:
            raise ValueError(f"resize_pause_s must be >= 0 seconds, got {resize_pause_s}")
        self.default_pause_s = float(resize_pause_s)
        self.pauses: List[float] = []         # measured pauses of this job's resizes (observe_pause)
        self.model = model
        self.min_np, self.max_np = int(min_np), int(max_np)
        self.margin, self.patience, self.dwell = float(margin), int(patience), int(dwell)
        self._pending: Optional[int] = None
        self._wins = 0
        self._last_np: Optional[int] = None
        self._left_np: Optional[int] = None   # the count before the last resize
        self._held = 0                        # evaluations since the last resize

    def observe_pause(self, seconds: float) -> None:
        """One resize's pause: seconds from the decision to the first step at the new size."""
        if not seconds >= 0:
            raise ValueError(f"a resize's pause must be >= 0 seconds, got {seconds}")
        self.pauses.append(float(seconds))

    def pause_estimate(self) -> Tuple[float, str]:
        """(P, where it comes from): the median measured pause, else the default."""
        if self.pauses:
            return statistics.median(self.pauses), f"median of {len(self.pauses)} measured"
        return self.default_pause_s, "default"

    def candidates(self) -> List[int]:
        """Counts in [min_np, max_np] that the hosts can give."""
        return [n for n in range(self.min_np, self.max_np + 1) if self.model.throughput(n) is not None]

    def goodput(self, n: int, current_np: int, b_noise: float) -> Optional[float]:
        """Predicted examples/s at n workers weighted by the efficiency of B(n) against B(current_np)."""
        tp = self.model.throughput(n)
        if tp is None:
            return None
        b = self.model.local_batch
        return tp * efficiency(current_np * b, n * b, b_noise)

    def evaluate(self, current_np: int, b_noise: Optional[float], step: int = 0,
                 remaining_s: Optional[float] = None) -> Decision:
        """remaining_s: seconds of training left at the current count, for the resize-cost rule (module
        doc); None when unknown (the rule is skipped)."""
        if remaining_s is not None and not remaining_s >= 0:
            raise ValueError(f"remaining_s must be >= 0 seconds or None, got {remaining_s}")
        if current_np != self._last_np:          # a resize (or the first call): confirmations start over
            first = self._last_np is None
            self._left_np = self._last_np
            self._pending, self._wins, self._last_np = None, 0, current_np
            self._held = self.dwell if first else 0
        self._held += 1
        if b_noise is None or not b_noise > 0:
            return self._hold(step, current_np, b_noise, "no noise-scale estimate yet")
        now = self.goodput(current_np, current_np, b_noise)
        if now is None:
            return self._hold(step, current_np, b_noise, "no throughput measured at the current count yet")
        table = {n: g / now for n in self.candidates() if (g := self.goodput(n, current_np, b_noise)) is not None}
        best = max(table, key=lambda n: (table[n], -abs(n - current_np)))
        gain = table[best]
        margin = 2 * self.margin if best == self._left_np else self.margin
        if self._held <= self.dwell:
            self._pending, self._wins = None, 0
            return Decision(step, current_np, b_noise, best, gain, None, table,
                            f"holding after the resize ({self._held} of {self.dwell} evaluations)")
        if best == current_np or gain <= 1.0 + margin:
            self._pending, self._wins = None, 0
            why = "current count is best" if best == current_np else \
                f"{best} workers gain {gain - 1:+.1%}, within the {margin:.0%} margin"
            return Decision(step, current_np, b_noise, best, gain, None, table, why)
        pause, source = self.pause_estimate()
        cost = ""   # the rule's inputs, for the reason (the trace's and the log's line)
        if remaining_s is not None:
            saving = remaining_s * (1.0 - 1.0 / gain)
            cost = (f"; saves {saving:.1f} s of {remaining_s:.1f} s left against a resize pause of {pause:.1f} s "
                    f"({source})")
            if saving <= pause:
                self._pending, self._wins = None, 0
                return Decision(step, current_np, b_noise, best, gain, None, table,
                                f"{best} workers gain {gain - 1:+.1%} but do not pay for the resize{cost}",
                                remaining_s, pause)
        self._wins = self._wins + 1 if self._pending == best else 1
        self._pending = best
        if self._wins < self.patience:
            return Decision(step, current_np, b_noise, best, gain, None, table,
                            f"{best} workers gain {gain - 1:+.1%}: {self._wins} of {self.patience} confirmations"
                            f"{cost}", remaining_s, pause)
        self._pending, self._wins = None, 0
        verb = "grow" if best > current_np else "shrink"
        return Decision(step, current_np, b_noise, best, gain, best, table,
                        f"{verb} to {best} workers: {gain - 1:+.1%} goodput, confirmed {self.patience} times{cost}",
                        remaining_s, pause)

    def _hold(self, step, current_np, b_noise, why):
        return Decision(step, current_np, b_noise if b_noise is not None else float("nan"), current_np, 1.0,
                        None, {}, why)
