"""The DistributedOptimizer side of the gradient noise-scale measurement (measure_noise_scale=True).

Terms (docs/scaling.md): g_k is worker k's accumulated local gradient for one optimizer step, G the
averaged gradient after the allreduce. Each step the tap collects
  local_sq  = |g_k|^2, summed over parameters as each gradient's allreduce starts (before compression);
              for dense CPU float32/float64 gradients sent uncompressed the engine takes it while it
              enqueues the allreduce (Request::sumsq_in, csrc/engine/request.h), so the hook makes no
              norm call of its own;
  A_s       = mean_k |g_k|^2: one extra float32 tensor (one entry per parameter group with
              measure_noise_scale="per_group"), allreduced (Average) by a request enqueued in the same
              call as the step's last gradient (attach_send), which fills it from the engine's float64
              sums (Request::fill_from): it makes the same negotiation round and fused buffer as that
              gradient. (Submitted a few tens of microseconds later from Python, it missed that round
              in half the steps, and the step waited for one more round.) Where the last gradient goes
              out another way (sparse), start() sends it on its own;
  A_b       = |G|^2, summed over the reduced gradients after synchronize (so before any clipping the
              script does between synchronize() and step()); for the gradients above, the engine adds
              it as each result is written (Request::sumsq_out).
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

Rank 0 logs the estimator's one-line summary (an INFO record of "pyhorovod.scaling.noise_scale") every
PYHOROVOD_NOISE_SCALE_LOG_EVERY measured steps (default 100; 0: never). PYHOROVOD_NOISE_SCALE_EVERY=k
measures only every k-th step (default 1): the cost per step falls k-fold and the EMAs span k times more
steps; every rank skips the same steps, so the extra allreduce stays matched.

Step times for the advisor: the wall time between consecutive steps, and as its communication
part the time from the submission of the step's last gradient to the end of synchronize.
"""
import logging
import os
import time

import torch

from pyhorovod import _api, _core, _logging, basics
from pyhorovod.torch import _convert as cv, ops

# dense CPU dtypes whose squared norm _core.sum_of_squares takes straight from the tensor's memory
_CORE_SUMSQ = {torch.float32: _core.FLOAT32, torch.float64: _core.FLOAT64}


def ema_from_env(global_batch):
    """{"ema_beta": ...} from PYHOROVOD_NOISE_SCALE_HORIZON (examples the EMAs span), else {} (beta 0.99).
    A horizon in examples averages over the same stretch of training at every worker count, which a
    horizon in steps does not (100 steps at 4 workers are twice the examples of 100 steps at 2)."""
    from pyhorovod.scaling.noise_scale import horizon_beta
    raw = os.environ.get("PYHOROVOD_NOISE_SCALE_HORIZON")
    if not raw:
        return {}
    try:
        horizon = float(raw)
    except ValueError:
        raise ValueError(f"PYHOROVOD_NOISE_SCALE_HORIZON={raw!r}: expected a number of examples") from None
    return {"ema_beta": horizon_beta(max(horizon, global_batch + 1), global_batch)}


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
        log_fn = None
        if basics.rank() == 0 and log_every:
            _logging.show_reports()
            log_fn = logging.getLogger("pyhorovod.scaling.noise_scale").info
        self.estimator = NoiseScaleEstimator.for_config(
            int(batch_size), int(workers), int(backward_passes_per_step), groups=ngroups,
            log_every=log_every, log_fn=log_fn, **ema_from_env(int(batch_size) * int(workers)
                                                                * int(backward_passes_per_step)))
        self.b_small, self.b_big = self.estimator.b_small, self.estimator.b_big
        self.micro = self.estimator.mode == "micro_batches"
        self.passes = int(backward_passes_per_step)
        self.workers = int(workers)
        self.op = op
        self.process_set = process_set
        self._ngroups = ngroups
        self._local = None       # GPU gradients: per group sum of |grad|^2, a float64 device tensor (no sync)
        # The engine's squared-norm taps: [local |g|^2 per group..., reduced |G|^2 per group...], written by
        # the engine through raw addresses (engine_slots), so this tensor lives as long as the tap.
        self._engine_sq = torch.zeros(2 * ngroups, dtype=torch.float64)
        self._dirty = False      # _engine_sq holds sums of this step
        base = self._engine_sq.data_ptr()
        self._slot_addrs = [(base + 8 * g, base + 8 * (ngroups + g)) for g in range(ngroups)]
        self._py_params = set()  # parameters whose norms the tap takes itself (not through the engine)
        self._send = torch.zeros(ngroups, dtype=torch.float32)   # the extra allreduce's buffer
        self._send_op = None
        self._given = 0          # parameters whose allreduce started this step (engine_slots calls)
        self.params_per_step = 0  # set by the optimizer: allreduces per step (attach_send's "last")
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

    def engine_slots(self, grad, param, sent_as_is=True):
        """Called as param's allreduce starts. Returns the (sumsq_in, sumsq_out) addresses for the engine
        to add |grad|^2 and |reduced|^2 into, or None after taking |grad|^2 here (accumulate): the engine
        does it for dense CPU float32/float64 gradients the allreduce sends as they are (sent_as_is: no
        compression), the tap for anything else. None as well on steps that are not measured."""
        if self._step % self.every:
            return None
        self._given += 1
        if (sent_as_is and not self.micro and grad.dtype in _CORE_SUMSQ and not grad.is_sparse
                and grad.device.type == "cpu"):
            self._dirty = True
            return self._slot_addrs[self._group_of.get(id(param), 0) if self._group_of else 0]
        self.accumulate(grad, param)
        self._py_params.add(param)
        return None

    def accumulate(self, grad, param=None):
        """Adds |grad|^2 of one parameter (called as its allreduce starts)."""
        if not self.active:
            return
        g = self._group(param) if self._group_of else 0
        if grad.device.type == "cpu":   # into the engine's sums, which the extra allreduce sends
            self._engine_sq[g] += self._sq(grad)
            self._dirty = True
            return
        norm = self._norm(grad)   # GPU: stays on the device (no synchronisation in the hook)
        if self._local is None:
            self._local = torch.zeros(self._ngroups, dtype=torch.float64, device=norm.device)
        self._local[g] += norm.double() ** 2

    def attach_send(self):
        """Called as a gradient's allreduce is submitted: the extra allreduce's request when this is the
        step's last gradient (to be enqueued right behind it, so both make the same negotiation round and
        the same fused buffer; the optimizer's synchronize then waits for it), else ()."""
        if self._given != self.params_per_step or self._handle is not None or self.micro or \
                self._local is not None or self._step % self.every:
            return ()
        self._started_at = time.perf_counter()
        self._handle = self._ATTACHED
        return self._send_ops()

    def _send_ops(self):
        """The extra allreduce, built once: the engine fills its float32 buffer from the float64 local
        sums as it enqueues it (Request::fill_from)."""
        if self._send_op is None:
            ptr = self._send.data_ptr()
            self._send_op = [_api.Op(_core.ALLREDUCE, _core.FLOAT32, (self._ngroups,), ptr, ptr,
                                     name=self._SEND_NAME, reduce_op=_api.Average,
                                     process_set=cv.process_set(self.process_set).process_set_id,
                                     fill_from=self._engine_sq.data_ptr())]
        return self._send_op

    def start(self):
        """Submits the allreduce of local |g_k|^2 (once per step, after the last gradient) unless it went
        out with the last gradient (attach_send)."""
        if self._handle is not None or self.micro or not self.active:
            return
        self._started_at = time.perf_counter()
        local = self._local
        if local is not None:   # GPU gradients: a device tensor (plus any CPU parameters' sums)
            if self._dirty:
                local = local + self._engine_sq[:self._ngroups].to(local.device)
            self._handle = ops.allreduce_async_(local.to(torch.float32), name=self._SEND_NAME,
                                                op=_api.Average, process_set=self.process_set)
            return
        self._handle = _api.submit(self._send_ops(), self._send, self._send_result)

    # One fixed name: steady state then hits the engine's response cache like the gradients do.
    _SEND_NAME = "noise_scale.local_sq"
    _ATTACHED = -1   # _handle when the request went out with the last gradient's handle

    def _send_result(self, _):
        return self._send

    @property
    def started(self):
        return self._handle is not None or self.micro or not self.active

    def finish(self, reduced_grads, lr, params):
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
            if self._handle == self._ATTACHED:   # synchronized with the last gradient
                a_s = self._send.tolist()
            else:
                a_s = ops.synchronize(self._handle).tolist()
            self._handle = None
        self._step += 1
        # A_b: the engine summed it for the gradients it was given slots for; the tap sums the rest.
        if self.micro:
            taken = range(len(reduced_grads))
        else:
            taken = [i for i, p in enumerate(params) if p in self._py_params] if self._py_params else ()
        groups = [self._group(params[i]) for i in taken]
        a_b = self._sq_sums([reduced_grads[i] for i in taken], groups, self._ngroups)
        if self._dirty and not self.micro:
            a_b = [a + b for a, b in zip(a_b, self._engine_sq.tolist()[self._ngroups:])]
        self.reset_step()
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

    def reset_step(self):
        """Forgets the current step's sums (after finish, or when the optimizer abandons a failed step)."""
        if self._dirty:
            self._engine_sq.zero_()
            self._dirty = False
        self._py_params.clear()
        self._local = None
        self._given = 0

    def abandon(self):
        """The optimizer gave up this step (a failed synchronize): wait out the extra allreduce, if any,
        and start the next step from zero."""
        if self._handle is not None and self._handle != self._ATTACHED:   # attached: the optimizer waits
            try:
                ops.synchronize(self._handle)
            except Exception:  # noqa: BLE001 -- failed or done: either way nothing writes into it any more
                pass
        self._handle = None
        self._started_at = None
        self._micro_sq.zero_()
        self._prev.clear()
        self.reset_step()

    def report(self):
        return None if self.estimator.calls == 0 else self.estimator.report()
