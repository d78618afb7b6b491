"""The DistributedOptimizer side of the gradient noise-scale measurement (measure_noise_scale=True).

Terms (design.md section 6): g_k is worker k's accumulated local gradient for one optimizer step, G the
averaged gradient after the allreduce. Each step the tap collects
  local_sq  = |g_k|^2, summed over parameters as each gradient's allreduce starts (before compression);
  A_s       = mean_k |g_k|^2: one extra float32 tensor (one entry per parameter group with
              measure_noise_scale="per_group"), allreduced (Average) right after the last gradient of the
              step is submitted, so the engine fuses it with the gradients instead of spending a separate
              round trip;
  A_b       = |G|^2, summed over the reduced gradients after synchronize (so before any clipping the
              script does between synchronize() and step()).
and hands them to pyhorovod.scaling.noise_scale.NoiseScaleEstimator (EMAs, B_simple, the advisor),
built by NoiseScaleEstimator.for_config: b_small = local batch x backward_passes_per_step, b_big =
b_small x workers.

One worker with backward_passes_per_step = m >= 2 ("micro_batches" mode): the m micro-batches stand in
for workers. The hook of every backward pass reports the parameter (on_pass); the tap keeps the previous
accumulated gradient, so micro-batch j's gradient is S_j - S_{j-1}; A_s = mean_j |S_j - S_{j-1}|^2 and
A_b = |S_m / m|^2. Both are in the units of the accumulated gradients, whether or not the script divides
its loss by m, so B_simple is right either way (|G|^2 and tr(Sigma) are in those units too). This costs
one copy of the gradients and is only done in that mode.

AMP: gradients are those of the scaled loss until unscale_; set optimizer.noise_scale_estimator
.grad_scale = scaler.get_scale() each step (the estimator divides by its square) -- see noise_scale.py.

Rank 0 prints the estimator's one-line summary every PYHOROVOD_NOISE_SCALE_LOG_EVERY measured steps
(default 100; 0: never). PYHOROVOD_NOISE_SCALE_EVERY=k measures only every k-th step (default 1): the
cost per step falls k-fold and the EMAs span k times more steps; every rank skips the same steps, so the
extra allreduce stays matched.

Step times for the advisor: the wall time between consecutive steps, and as its communication
part the time from the submission of the step's last gradient to the end of synchronize.
"""
import os
import time

import torch

from pyhorovod import _api, _core, basics
from pyhorovod.torch import ops

# dense CPU dtypes whose squared norm _core.sum_of_squares takes straight from the tensor's memory
_CORE_SUMSQ = {torch.float32: _core.FLOAT32, torch.float64: _core.FLOAT64}


class NoiseScaleTap:
    def __init__(self, batch_size, backward_passes_per_step, workers, op, process_set, param_groups=None,
                 per_group=False):
        if batch_size is None or not batch_size > 0:
            raise ValueError("measure_noise_scale=True needs batch_size= (the local batch of one backward "
                             "pass) to know B_small and B_big")
        if op not in (_api.Average, _api.Sum):
            raise ValueError("measure_noise_scale=True needs op=Average or Sum")
        from pyhorovod.scaling.noise_scale import NoiseScaleEstimator
        groups = param_groups if per_group and param_groups else []
        self._group_of = {id(p): i for i, g in enumerate(groups) for p in g["params"]}
        ngroups = max(1, len(groups))
        log_every = int(os.environ.get("PYHOROVOD_NOISE_SCALE_LOG_EVERY", "100"))
        self.every = int(os.environ.get("PYHOROVOD_NOISE_SCALE_EVERY", "1"))
        if self.every < 1 or log_every < 0:
            raise ValueError("PYHOROVOD_NOISE_SCALE_EVERY must be >= 1, PYHOROVOD_NOISE_SCALE_LOG_EVERY >= 0")
        log_fn = (lambda line: print(line, flush=True)) if basics.rank() == 0 else None
        self.estimator = NoiseScaleEstimator.for_config(
            int(batch_size), int(workers), int(backward_passes_per_step), groups=ngroups,
            log_every=log_every, log_fn=log_fn)
        self.b_small, self.b_big = self.estimator.b_small, self.estimator.b_big
        self.micro = self.estimator.mode == "micro_batches"
        self.passes = int(backward_passes_per_step)
        self.workers = int(workers)
        self.op = op
        self.process_set = process_set
        self._ngroups = ngroups
        self._local = None       # per group sum of |grad|^2: floats (CPU), a float64 tensor (GPU: no sync)
        self._micro_sq = torch.zeros(self.passes, ngroups, dtype=torch.float64)
        self._prev = {}          # micro mode: parameter -> (passes seen this step, previous accumulated grad)
        self._handle = None
        self._step = 0
        self._last_finish = None
        self._started_at = None

    @property
    def active(self):
        """Whether this step is measured (PYHOROVOD_NOISE_SCALE_EVERY)."""
        return self._step % self.every == 0

    def _group(self, param):
        return self._group_of.get(id(param), 0) if param is not None else 0

    @staticmethod
    def _norm(grad):
        """|grad| as a 0-dim tensor on grad's device, accumulated in at least float32: one kernel call,
        the least this can cost in a hook that delays the gradient's allreduce."""
        g = grad.coalesce().values() if grad.is_sparse else grad
        return torch.linalg.vector_norm(g, dtype=torch.float64 if g.dtype == torch.float64 else torch.float32)

    @classmethod
    def _sq(cls, grad):
        """|grad|^2 as a Python float. Contiguous float32/float64 CPU tensors go to the C++ kernel (a few
        us; a torch norm call costs ~14 us inside backward, 8 of them were 1-2% of the example CNN's
        step); anything else takes one torch norm kernel."""
        code = _CORE_SUMSQ.get(grad.dtype)
        if code is not None and grad.device.type == "cpu" and not grad.is_sparse and grad.is_contiguous():
            return _core.sum_of_squares(grad.data_ptr(), grad.numel(), code)
        return float(cls._norm(grad)) ** 2

    @classmethod
    def _sq_sums(cls, grads, groups, ngroups):
        """Per group sums of |g|^2 (Python floats); dense gradients in one _foreach_norm call."""
        out = [0.0] * ngroups
        if all(g.device.type == "cpu" for g in grads):
            for i, g in enumerate(grads):
                out[groups[i]] += cls._sq(g)
            return out
        dense = [i for i, g in enumerate(grads)
                 if not g.is_sparse and g.dtype in (torch.float32, torch.float64)]
        norms = {}
        if dense:
            try:
                norms = dict(zip(dense, torch.stack(torch._foreach_norm([grads[i] for i in dense])).tolist()))
            except (RuntimeError, TypeError, AttributeError):   # mixed devices/dtypes: one at a time
                norms = {}
        for i, g in enumerate(grads):
            n = norms[i] if i in norms else float(cls._norm(g))
            out[groups[i]] += n * n
        return out

    def on_pass(self, param):
        """Micro mode: called from the parameter's hook after every backward pass (p.grad = S_j)."""
        if not self.micro or param.grad is None or not self.active:
            return
        seen, prev = self._prev.get(param, (0, None))
        cur = param.grad.detach()
        cur = cur.to_dense() if cur.is_sparse else cur
        diff = cur if prev is None else cur - prev
        if seen < self.passes:
            self._micro_sq[seen, self._group(param)] += diff.double().pow(2).sum()
        self._prev[param] = (seen + 1, cur.clone())

    def accumulate(self, grad, param=None):
        """Adds |grad|^2 of one parameter (called as its allreduce starts)."""
        if not self.active:
            return
        if grad.device.type == "cpu":
            if self._local is None:
                self._local = [0.0] * self._ngroups
            self._local[self._group(param) if self._group_of else 0] += self._sq(grad)
            return
        norm = self._norm(grad)   # GPU: stays on the device (no synchronisation in the hook)
        if self._local is None:
            self._local = torch.zeros(self._ngroups, dtype=torch.float64, device=norm.device)
        self._local[self._group(param)] += norm.double() ** 2

    def start(self):
        """Submits the allreduce of local |g_k|^2 (once per step, after the last gradient)."""
        if self._handle is not None or self.micro or not self.active:
            return
        self._started_at = time.perf_counter()
        local = [0.0] * self._ngroups if self._local is None else self._local
        buf = (torch.tensor(local, dtype=torch.float32) if isinstance(local, list)
               else local.to(torch.float32))
        # One fixed name: steady state then hits the engine's response cache like the gradients do.
        self._handle = ops.allreduce_async_(buf, name="noise_scale.local_sq", op=_api.Average,
                                            process_set=self.process_set)

    @property
    def started(self):
        return self._handle is not None or self.micro or not self.active

    def finish(self, reduced_grads, lr, params=None):
        """After synchronize: A_s from the extra allreduce (or the micro-batches), A_b from the reduced
        gradients (params: the parameters of reduced_grads, for per-group sums)."""
        if not self.active:
            self._step += 1
            self._last_finish = time.perf_counter()
            return
        if self.micro:
            a_s = self._micro_sq.mean(dim=0).tolist()
            self._micro_sq.zero_()
            self._prev.clear()
        else:
            if self._handle is None:
                self.start()
            a_s = ops.synchronize(self._handle).tolist()
            self._handle = None
        self._local = None
        self._step += 1
        groups = [self._group(params[i] if params is not None else None) for i in range(len(reduced_grads))]
        a_b = self._sq_sums(reduced_grads, groups, self._ngroups)
        div = 1.0
        if self.op == _api.Sum:      # the reduced gradient is a sum over workers: G is its mean
            div *= self.workers ** 2
        if self.micro:               # S_m sums the m micro-batch gradients: their mean is S_m / m
            div *= self.passes ** 2
        if div != 1.0:
            a_b = [v / div for v in a_b]
        now = time.perf_counter()
        if self._last_finish is not None:
            sync = 0.0 if self._started_at is None else min(now - self._started_at, now - self._last_finish)
            self.estimator.record_step_time(now - self._last_finish, sync)
        self._last_finish, self._started_at = now, None
        self.estimator.update(a_s, a_b, lr)

    def report(self):
        return None if self.estimator.calls == 0 else self.estimator.report()
