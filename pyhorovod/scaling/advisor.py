"""Critical-batch advisor: what the noise scale says about adding workers or growing the batch.

Model (McCandlish et al. 2018, eq. 2.11): to reach a given loss, training at batch B needs

    S(B) = S_min (1 + B_crit / B) steps   and   E(B) = E_min (1 + B / B_crit) examples,

with S_min the steps at infinite batch, E_min = S_min B_crit the examples at batch -> 0, and the critical
batch B_crit ~ B_noise, estimated live by B_simple. Everything below is a ratio, so S_min and E_min (which
depend on the target) cancel.

Regimes, from the slope d log S / d log B = -B_crit / (B + B_crit):
  perfect scaling      B <= B_crit/9   (doubling B still cuts steps by >= 45%: slope <= -0.9)
  plateau              B >= 9 B_crit   (slope >= -0.1: more batch buys almost nothing)
  diminishing returns  in between.

Workers limit, with local batch b per worker (b includes accumulated micro-batches) and K workers, x =
B_crit/(K b): even infinitely many more workers cut the steps by the fraction x/(1+x) only, which is below
f (default 10%) once K > K* = B_crit (1 - f) / (f b). `workers_limit` is ceil(K*). The weaker "doubling
the workers still saves f" criterion gives K > B_crit (1/2 - f) / (f b) (`workers_limit_doubling`).

Goodput (Pollux/AdaptDL, Qiao et al. 2021): progress per second = throughput x statistical efficiency,
where the efficiency of batch M relative to the current batch M0 is E(M0)/E(M) = (B_crit + M0)/(B_crit + M)
(examples needed at M0 over examples needed at M). Throughput comes from measured step times with the
model T(b, a) = a (t0 + t1 b) + t_sync for a micro-batch of b examples per worker accumulated a times;
t0, t1 are a least-squares fit over the local batch sizes observed, and t_sync is the median time the
step spent waiting for communication. With a single local batch size observed (the usual case) and no
`compute_overhead_s`, the time of another micro-batch size would be a guess, so the search keeps the
local batch and varies only the accumulation a, whose cost a x (measured compute) + t_sync is known;
`search_local_batch` in the report says which case applies. The recommendation changes only
after the best candidate beats the current batch by more than `hysteresis` on `patience` consecutive
evaluations (new steps), so estimator noise does not make it flap.
"""
import math
from collections import defaultdict, deque

import numpy as np


def steps_ratio(batch, new_batch, b_crit):
    """S(new_batch) / S(batch)."""
    return (1.0 + b_crit / new_batch) / (1.0 + b_crit / batch)


def examples_ratio(batch, new_batch, b_crit):
    """E(new_batch) / E(batch)."""
    return (1.0 + new_batch / b_crit) / (1.0 + batch / b_crit)


def efficiency(batch, new_batch, b_crit):
    """Statistical efficiency of new_batch relative to batch (Pollux): E(batch) / E(new_batch)."""
    return (b_crit + batch) / (b_crit + new_batch)


def regime(batch, b_crit):
    if batch <= b_crit / 9.0:
        return "perfect scaling"
    if batch >= 9.0 * b_crit:
        return "plateau"
    return "diminishing returns"


def workers_limit(b_crit, per_worker_batch, fraction=0.10, doubling=False):
    """Smallest worker count K beyond which more workers cut steps by less than `fraction` (module doc)."""
    if not 0.0 < fraction < (0.5 if doubling else 1.0):
        raise ValueError(f"fraction must be in (0, {0.5 if doubling else 1.0}), got {fraction}")
    factor = (0.5 - fraction) if doubling else (1.0 - fraction)
    k_star = b_crit * factor / (fraction * per_worker_batch)
    return max(1, math.ceil(k_star - 1e-9))


class Advisor:
    """Turns B_simple and measured step times into the advice fields of the noise-scale report.

    local_batch: examples per worker per backward pass; workers: K; backward_passes_per_step: a.
    fraction: the "less than 10% fewer steps" threshold. hysteresis, patience: see module doc.
    min_local_batch/max_local_batch/max_accumulation bound the goodput search (default: b/4 .. b, a <= 8;
    larger batches come from accumulation because memory limits are unknown here).
    """

    def __init__(self, local_batch, workers, backward_passes_per_step=1, fraction=0.10, hysteresis=0.05,
                 patience=3, min_local_batch=None, max_local_batch=None, max_accumulation=8,
                 compute_overhead_s=None, window=200):
        if local_batch < 1 or workers < 1 or backward_passes_per_step < 1:
            raise ValueError("local_batch, workers and backward_passes_per_step must be >= 1")
        if hysteresis < 0 or patience < 1 or max_accumulation < 1:
            raise ValueError("need hysteresis >= 0, patience >= 1, max_accumulation >= 1")
        self.local_batch = int(local_batch)
        self.workers = int(workers)
        self.accumulation = int(backward_passes_per_step)
        self.fraction = fraction
        self.hysteresis = hysteresis
        self.patience = patience
        self.min_local_batch = int(min_local_batch or max(1, self.local_batch // 4))
        self.max_local_batch = int(max_local_batch or self.local_batch)
        if not 1 <= self.min_local_batch <= self.max_local_batch:
            raise ValueError(f"need 1 <= min_local_batch <= max_local_batch, got "
                             f"{self.min_local_batch}, {self.max_local_batch}")
        self.max_accumulation = int(max_accumulation)
        self.compute_overhead_s = compute_overhead_s
        self._compute = defaultdict(lambda: deque(maxlen=window))  # micro-batch b -> per-pass seconds
        self._sync = deque(maxlen=window)
        self._step_time = deque(maxlen=window)
        self._pending = None      # (candidate batch, consecutive evaluations it has won)
        self._last_step = None
        self.recommended = None   # (global batch, local batch, accumulation) or None = keep current

    @property
    def batch(self):
        return self.local_batch * self.accumulation * self.workers

    def observe_step(self, step_time_s, sync_time_s=0.0, local_batch=None, accumulation=None):
        if not (step_time_s > 0 and 0 <= sync_time_s <= step_time_s):
            raise ValueError(f"need step_time_s > 0 and 0 <= sync_time_s <= step_time_s, got "
                             f"{step_time_s}, {sync_time_s}")
        b = int(local_batch or self.local_batch)
        a = int(accumulation or self.accumulation)
        self._compute[b].append((step_time_s - sync_time_s) / a)
        self._sync.append(sync_time_s)
        self._step_time.append(step_time_s)

    def time_model(self):
        """(t0, t1, t_sync) of T(b, a) = a (t0 + t1 b) + t_sync, or None before any observation."""
        if not self._step_time:
            return None
        sizes = sorted(self._compute)
        med = [float(np.median(self._compute[b])) for b in sizes]
        if len(sizes) >= 2:
            t1, t0 = np.polyfit(np.asarray(sizes, float), np.asarray(med), 1)
            t0, t1 = max(float(t0), 0.0), max(float(t1), 1e-12)
        else:
            t0 = float(self.compute_overhead_s or 0.0)
            t1 = max(med[0] - t0, 1e-12) / sizes[0]
        return t0, t1, float(np.median(self._sync))

    def _extrapolates(self):
        """True when the time model covers other micro-batch sizes (>= 2 observed, or t0 given)."""
        return len(self._compute) >= 2 or self.compute_overhead_s is not None

    def _candidates(self):
        powers = {2 ** j for j in range(int(math.log2(self.max_accumulation)) + 1)}
        accs = sorted(powers | {self.accumulation})
        if not self._extrapolates():
            return [(self.local_batch, a) for a in accs]
        b = self.min_local_batch
        locals_ = set()
        while b <= self.max_local_batch:
            locals_.add(b)
            b *= 2
        locals_.update({self.local_batch, self.max_local_batch})
        return [(lb, a) for lb in sorted(locals_) for a in accs]

    def goodput(self, b_crit, local_batch, accumulation, model):
        """Relative progress per second (examples/s x efficiency vs the current batch)."""
        t0, t1, ts = model
        m = local_batch * accumulation * self.workers
        t = accumulation * (t0 + t1 * local_batch) + ts
        return m / t * efficiency(self.batch, m, b_crit)

    def advise(self, b_simple, step=None):
        """Advice dict for the report (step: the estimator step, so repeated reads do not count twice
        towards the hysteresis)."""
        bc = float(b_simple)
        if not bc > 0:
            return {}
        B, b_eff = self.batch, self.local_batch * self.accumulation
        out = {
            "critical_batch": bc,
            "batch": B,
            "regime": regime(B, bc),
            "steps_vs_min": 1.0 + bc / B,
            "examples_vs_min": 1.0 + B / bc,
            "steps_if_doubled": steps_ratio(B, 2 * B, bc),
            "examples_if_doubled": examples_ratio(B, 2 * B, bc),
            "predictions": [{"batch": int(B * f), "steps": steps_ratio(B, B * f, bc),
                             "examples": examples_ratio(B, B * f, bc)}
                            for f in (0.25, 0.5, 1, 2, 4, 8, 16) if B * f >= 1],
            "workers": self.workers,
            "workers_limit": workers_limit(bc, b_eff, self.fraction),
            "workers_limit_doubling": workers_limit(bc, b_eff, self.fraction, doubling=True),
        }
        model = self.time_model()
        if model is None:
            return out
        t_now = self.accumulation * (model[0] + model[1] * self.local_batch) + model[2]
        current = self.goodput(bc, self.local_batch, self.accumulation, model)
        best = max(self._candidates(), key=lambda c: self.goodput(bc, c[0], c[1], model))
        gain = self.goodput(bc, best[0], best[1], model) / current
        best_batch = best[0] * best[1] * self.workers
        if step is None or step != self._last_step:
            self._last_step = step
            if best_batch != B and gain > 1.0 + self.hysteresis:
                won = self._pending[1] + 1 if self._pending and self._pending[0] == best_batch else 1
                self._pending = (best_batch, won)
                if won >= self.patience:
                    self.recommended = (best_batch, best[0], best[1])
            else:
                self._pending = None
                self.recommended = None
        out.update({
            "step_time_s": float(np.median(self._step_time)),
            "sync_time_s": model[2],
            "throughput": B / t_now,
            "goodput_optimal_batch": best_batch,
            "goodput_optimal_local_batch": best[0],
            "goodput_optimal_accumulation": best[1],
            "goodput_gain": gain,
            "recommended_batch": self.recommended[0] if self.recommended else B,
            "search_local_batch": self._extrapolates(),
        })
        return out

    def summary(self, rep):
        """One line from an advice dict (keys as returned by advise)."""
        if "critical_batch" not in rep:
            return f"batch {self.batch}"
        s = (f"batch {rep['batch']} ({self.workers}x{self.local_batch}"
             f"{'x' + str(self.accumulation) if self.accumulation > 1 else ''}): {rep['regime']}, "
             f"steps {rep['steps_vs_min']:.2f}x S_min; 2x batch -> {rep['steps_if_doubled']:.2f}x steps, "
             f"{rep['examples_if_doubled']:.2f}x examples; >{rep['workers_limit']} workers buy <"
             f"{self.fraction:.0%} fewer steps")
        if "goodput_optimal_batch" in rep:
            s += (f" | {rep['throughput']:.0f} ex/s, goodput-optimal batch {rep['goodput_optimal_batch']} "
                  f"({rep['goodput_gain'] - 1:+.0%})")
            if rep["recommended_batch"] != rep["batch"]:
                s += f", recommend batch {rep['recommended_batch']}"
        return s
