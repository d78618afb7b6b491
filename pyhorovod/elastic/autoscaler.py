"""Rank 0's side of `pyhorovod run --autoscale goodput`: measure, decide, ask the driver for a new size.

Usage in the training loop (every rank calls it after each optimizer step; only rank 0 acts)::

    opt = hvd.DistributedOptimizer(..., measure_noise_scale=True, batch_size=local_batch)
    scaler = Autoscaler(opt)            # settings from the launcher's environment (runner/autoscale_option.py)
    for batch in loader:
        ...; opt.step(); scaler.step()

Every `every` steps it reads the live B_simple (the noise-scale estimator's ratio of EMAs) and feeds
the step times of the steps since into the throughput model (scaling/throughput.py), asks the decision
logic (scaling/autoscale.py) for the best worker count and, when that is confirmed, sets the driver's
target (`_membership.request_size`). The driver then starts workers on free slots, or lets the highest
ranks go, and the workers re-form at their next reset. The first `settle` steps after a change of size
are not measured (re-initialisation and the LR warmup make them slow). A CSV/PNG trace
(scaling/autoscale_trace.py) is written when a trace path is set.

Resize cost (scaling/autoscale.py): a script that knows how long it has left passes
`step(remaining_s=...)` (say, steps left x the last step time); a move is then made only when it saves
more than a resize's pause. The pause is measured here, from the step that asked for a size to the first
step at a new size; without remaining_s the rule is skipped.

After a resize the training script builds its DistributedOptimizer for the new size and calls
`rebind(new_optimizer)`: the new estimator takes over the old EMAs (they do not depend on the batch).
"""
from __future__ import annotations

import os
import time
from typing import Mapping, Optional, Sequence

from pyhorovod.scaling.advisor import efficiency
from pyhorovod.scaling.autoscale import GoodputAutoscaler
from pyhorovod.scaling.throughput import Host, ThroughputModel

ENV = "PYHOROVOD_AUTOSCALE"                   # "goodput"
ENV_MIN, ENV_MAX = "PYHOROVOD_AUTOSCALE_MIN_NP", "PYHOROVOD_AUTOSCALE_MAX_NP"
ENV_EVERY = "PYHOROVOD_AUTOSCALE_EVERY"       # steps between evaluations
ENV_MARGIN = "PYHOROVOD_AUTOSCALE_MARGIN"     # hysteresis margin, a fraction
ENV_HOSTS = "PYHOROVOD_AUTOSCALE_HOSTS"       # "name:slots:cores,..." (default: this host, max_np slots)
ENV_TRACE = "PYHOROVOD_AUTOSCALE_TRACE"       # path prefix of the CSV/PNG trace

NEEDS_NOISE_SCALE = ("autoscaling needs the live noise scale: build the optimizer with "
                     "DistributedOptimizer(..., measure_noise_scale=True, batch_size=<local batch>)")


class NoNoiseScaleError(ValueError):
    """The job autoscales but its optimizer does not measure the noise scale. A class of its own so that
    a launcher that runs workers in-process (the Ray executor) can tell this mistake from a failure and
    raise it to the user at once instead of retrying the worker on other hosts."""


def parse_hosts(text: str) -> list:
    """'name:slots:cores,...' -> [Host]."""
    hosts = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        parts = item.split(":")
        if len(parts) != 3:
            raise ValueError(f"{ENV_HOSTS}: expected name:slots:cores, got {item!r}")
        try:
            hosts.append(Host(parts[0], int(parts[1]), int(parts[2])))
        except ValueError as exc:
            raise ValueError(f"{ENV_HOSTS}: bad entry {item!r}: {exc}") from None
    if not hosts:
        raise ValueError(f"{ENV_HOSTS} lists no host")
    return hosts


def _int_env(env, key, default=None):
    raw = env.get(key)
    if raw in (None, ""):
        if default is None:
            raise ValueError(f"autoscaling needs {key} (set by pyhorovod run --autoscale goodput --min-np A "
                             f"--max-np B)")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{key}={raw!r}: expected an integer") from None


class Autoscaler:
    """optimizer: a DistributedOptimizer built with measure_noise_scale=True (or estimator=: a
    NoiseScaleEstimator); the other arguments default to the launcher's environment (module doc).
    size_fn/rank_fn/request_fn/clock: the job's size and rank, the driver request and the clock
    (pyhorovod's and time.monotonic by default; tests pass their own). started_at: the clock reading
    the trace counts time and worker-seconds from (default: now)."""

    def __init__(self, optimizer=None, estimator=None, every: Optional[int] = None,
                 min_np: Optional[int] = None, max_np: Optional[int] = None, margin: Optional[float] = None,
                 hosts: Optional[Sequence[Host]] = None, trace: Optional[str] = None, settle: int = 20,
                 grad_bytes: Optional[float] = None, env: Optional[Mapping[str, str]] = None,
                 size_fn=None, rank_fn=None, request_fn=None, clock=time.monotonic,
                 started_at: Optional[float] = None):
        env = os.environ if env is None else env
        if estimator is None and optimizer is not None:
            estimator = getattr(optimizer, "noise_scale_estimator", None)
        if estimator is None:
            raise NoNoiseScaleError(NEEDS_NOISE_SCALE)
        self.estimator = estimator
        self.min_np = min_np if min_np is not None else _int_env(env, ENV_MIN)
        self.max_np = max_np if max_np is not None else _int_env(env, ENV_MAX)
        self.every = every if every is not None else _int_env(env, ENV_EVERY, 50)
        margin = margin if margin is not None else float(env.get(ENV_MARGIN) or 0.10)
        if self.every < 1:
            raise ValueError(f"autoscale: evaluate every >= 1 steps, got {self.every}")
        if hosts is None:
            hosts = parse_hosts(env[ENV_HOSTS]) if env.get(ENV_HOSTS) else \
                [Host("localhost", self.max_np, os.cpu_count() or 1)]
        if grad_bytes is None:
            grad_bytes = sum(p.numel() * p.element_size() for g in optimizer.param_groups
                             for p in g["params"]) if optimizer is not None else 0.0
        self.local_batch = estimator.local_batch * estimator.backward_passes_per_step
        self.model = ThroughputModel(hosts, self.local_batch, grad_bytes)
        self.decider = GoodputAutoscaler(self.model, self.min_np, self.max_np, margin)
        if size_fn is None or rank_fn is None:
            from pyhorovod import basics
            size_fn, rank_fn = size_fn or basics.size, rank_fn or basics.rank
        if request_fn is None:
            from pyhorovod.elastic._membership import request_size as request_fn
        self._size, self._rank, self._request, self._clock = size_fn, rank_fn, request_fn, clock
        self.settle = int(settle)
        trace = trace if trace is not None else env.get(ENV_TRACE)
        self.trace = None
        if trace and rank_fn() == 0:
            from pyhorovod.scaling.autoscale_trace import AutoscaleTrace
            self.trace = AutoscaleTrace(trace)
        self.steps = 0
        self.decisions = []
        self.requested: Optional[int] = None
        self._asked_at: Optional[float] = None   # clock reading of the last request, until the size changes
        self._np = None
        self._since_resize = 0
        self._t0 = clock() if started_at is None else started_at   # the trace's time 0 (clock's units)
        self._last_t = None

    def rebind(self, optimizer) -> None:
        """After a resize: use the new optimizer's estimator, keeping the old EMAs and measurements."""
        new = getattr(optimizer, "noise_scale_estimator", None)
        if new is None:
            raise NoNoiseScaleError(NEEDS_NOISE_SCALE)
        new.continue_from(self.estimator.state_dict())
        self.estimator = new

    def step(self, remaining_s: Optional[float] = None):
        """After each optimizer step, on every rank. remaining_s: the seconds of training left, when the
        script knows them (the resize-cost rule; module doc). Returns the Decision of an evaluation on
        rank 0, else None."""
        if self._rank() != 0:
            return None
        n, now = self._size(), self._clock()
        if n != self._np:
            if self._np is not None and self._asked_at is not None:   # the first step after our resize
                self.decider.observe_pause(now - self._asked_at)
                self._asked_at = None
            self._np, self._since_resize, self._last_t = n, 0, None
        self.steps += 1
        self._since_resize += 1
        if self._last_t is not None and self._since_resize > self.settle:
            wall = now - self._last_t
            last = self.estimator.last_step_time
            sync = min(last[1], wall) if last is not None else 0.0
            if wall > 0:
                self.model.observe(n, wall, sync)
        self._last_t = now
        if self.steps % self.every:
            return None
        return self.evaluate(n, now, remaining_s)

    def evaluate(self, n, now, remaining_s=None):
        b_noise = self.estimator.b_simple()
        d = self.decider.evaluate(n, b_noise, self.steps, remaining_s)
        self.decisions.append(d)
        if d.target_np is not None and d.target_np != self.requested:
            self._request(d.target_np)
            self.requested = d.target_np
            self._asked_at = now
        if self.trace is not None:
            self.trace.record(**self._row(d, n, now, remaining_s))
        return d

    def _row(self, d, n, now, remaining_s=None):
        b = self.local_batch
        bn = d.b_noise if d.b_noise == d.b_noise else None   # NaN: no estimate yet

        def weighted(tp, count):
            return None if tp is None or bn is None else tp * efficiency(b, count * b, bn)
        measured = None
        if n in self.model.measured_counts():
            measured = weighted(self.model.throughput(n), n)
        modelled = self.model.modelled_step_s(n)
        predicted = None if modelled is None else \
            weighted(n * b / (modelled * self.model.correction()), n)
        best = weighted(self.model.throughput(d.best_np), d.best_np)
        return {"step": d.step, "time_s": round(now - self._t0, 3), "workers": n, "global_batch": n * b,
                "b_simple": None if bn is None else round(bn, 2), "measured_goodput": measured,
                "predicted_goodput": predicted, "best_predicted_goodput": best, "best_np": d.best_np,
                "target_np": d.target_np, "remaining_s": remaining_s,
                "resize_pause_s": round(self.decider.pause_estimate()[0], 3), "reason": d.reason}

    def finish(self, target: str = "target"):
        """On rank 0 at the end (or when the target is reached): the trace's worker-seconds line and PNG.
        Returns the worker-seconds (None without a trace)."""
        if self.trace is None:
            return None
        return self.trace.finish(self._clock() - self._t0, self._size(), target)
