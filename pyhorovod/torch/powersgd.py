"""PowerSGD: low-rank gradient compression (Vogels, Karimireddy and Jaggi, NeurIPS 2019).

Terms. A gradient is "matrix-shaped" when it has two or more dimensions; it is viewed as an n x m matrix M
(n = shape[0], m = the product of the other dimensions: a conv kernel [out, in, kh, kw] is out x in*kh*kw).
With rank r (at most min(n, m)) one step of PowerSGD replaces the allreduce of M (n*m numbers) by two
allreduces of (n + m) * r numbers:

    M <- M + e                  error feedback: e is what earlier steps left out (this rank's own)
    P  = M Q                    Q (m x r): last step's Q (warm start) or random, the same on every rank
    P <- allreduce(P)           sum over ranks
    P <- orthonormalize(P)      columns orthonormal (Householder QR; Gram-Schmidt with epsilon > 0)
    Q  = M^T P
    Q <- allreduce(Q)           average (op=Average) or sum (op=Sum)
    M^ = P Q^T                  what the optimizer applies, the same on every rank
    e  = M - M^ (/ ranks with Sum)

Since P P^T is the projection onto P's columns, M^ = P P^T mean(M): when the averaged gradient has rank <= r
its column space is inside P's and M^ equals it to round-off. The P's of all compressed tensors travel in one
fused allreduce, their Q's in another. A tensor is compressed only when n*m >= min_compression_rate *
(n + m) * r; the others (biases, small layers) and all tensors before `start_iter` optimizer steps are
allreduced uncompressed (the uncompressed ones of this reducer in one fused request).

The state (iteration, Q's, error buffers) is per rank: the error buffers differ between ranks, so each rank
restores its own (state_dict / load_state_dict of the DistributedOptimizer carry it).
"""
import zlib

import torch

from pyhorovod import _api
from pyhorovod.process_sets import global_process_set
from pyhorovod.torch import ops


class PowerSGD:
    """Low-rank gradient compression for ``DistributedOptimizer(compression=PowerSGD(...))``.

    Args:
        rank: the rank r of the approximation M ~ P Q^T (>= 1).
        start_iter: optimizer steps allreduced uncompressed before compression starts (>= 0).
        min_compression_rate: compress a tensor only when it sends at least this many times fewer numbers.
        use_error_feedback: add what the approximation left out to the next step's gradient.
        warm_start: start each step's power iteration from the previous step's Q (else a fresh random Q).
        orthogonalization_epsilon: 0: orthonormalize P by Householder QR (exact also when P is rank
            deficient); > 0: by Gram-Schmidt, dividing by each column's norm plus this epsilon.
        seed: seed of the random Q's (the same on every rank).

    Raises:
        ValueError: rank < 1, start_iter < 0, min_compression_rate <= 0 or epsilon < 0.
    """

    def __init__(self, rank=4, start_iter=10, min_compression_rate=2, use_error_feedback=True, warm_start=True,
                 orthogonalization_epsilon=0, seed=0):
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"PowerSGD(rank={rank!r}): expected an integer >= 1")
        if isinstance(start_iter, bool) or not isinstance(start_iter, int) or start_iter < 0:
            raise ValueError(f"PowerSGD(start_iter={start_iter!r}): expected an integer >= 0")
        if not min_compression_rate > 0:
            raise ValueError(f"PowerSGD(min_compression_rate={min_compression_rate!r}): expected a number > 0")
        if not orthogonalization_epsilon >= 0:
            raise ValueError(f"PowerSGD(orthogonalization_epsilon={orthogonalization_epsilon!r}): expected >= 0")
        self.rank = rank
        self.start_iter = start_iter
        self.min_compression_rate = float(min_compression_rate)
        self.use_error_feedback = bool(use_error_feedback)
        self.warm_start = bool(warm_start)
        self.orthogonalization_epsilon = float(orthogonalization_epsilon)
        self.seed = int(seed)

    def __repr__(self):
        return (f"PowerSGD(rank={self.rank}, start_iter={self.start_iter}, min_compression_rate="
                f"{self.min_compression_rate:g}, use_error_feedback={self.use_error_feedback}, warm_start="
                f"{self.warm_start}, orthogonalization_epsilon={self.orthogonalization_epsilon:g})")

    def compresses(self, shape):
        """Whether a gradient of this shape is sent as P and Q."""
        if len(shape) < 2:
            return False
        n, m = shape[0], 1
        for d in shape[1:]:
            m *= d
        r = min(self.rank, n, m)
        return n * m >= self.min_compression_rate * (n + m) * r

    def check_op(self, op):
        if op not in (_api.Average, _api.Sum):
            raise ValueError(f"op={op!r}: compression=PowerSGD needs op=Average or op=Sum (the approximation "
                             f"is linear in the gradient, other reductions are not)")

    # A PowerSGD object is not a per-tensor compressor: hvd.allreduce(compression=PowerSGD(...)) is refused.
    def compress(self, tensor):
        raise ValueError("compression=PowerSGD(...) works across layers and steps: pass it to "
                         "DistributedOptimizer(compression=...), not to a single allreduce")

    decompress = compress


def orthonormalize(p, epsilon):
    """Columns of p made orthonormal, spanning at least the space of p's columns."""
    if epsilon == 0:
        return torch.linalg.qr(p, mode="reduced")[0]
    p = p.clone()
    for i in range(p.shape[1]):
        col = p[:, i]
        col /= col.norm() + epsilon
        if i + 1 < p.shape[1]:
            rest = p[:, i + 1:]
            rest -= torch.outer(col, col @ rest)
    return p


def _work_dtype(dtype):
    # QR and matmul want float32 or float64; 16-bit gradients are computed in float32.
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


class LowRankReducer:
    """One optimizer's PowerSGD state and exchange. begin(grads) starts this step's first allreduce;
    finish() completes the step and returns the reduced gradients; both once per optimizer step."""

    def __init__(self, config, op=_api.Average, process_set=global_process_set, name="PowerSGD"):
        config.check_op(op)
        self.config = config
        self.op = op
        self.process_set = process_set
        self.name = name
        self.iteration = 0       # optimizer steps done
        self.qs = {}             # tensor name -> Q (m x r) of the last step
        self.errors = {}         # tensor name -> e (n x m), this rank's residual
        self._pending = None     # (kind, names, grads, matrices, handle, buffer) between begin and finish

    def begin(self, named_grads):
        """named_grads: [(name, gradient)] in the same order on every rank."""
        if self._pending is not None:
            raise RuntimeError("LowRankReducer.begin() twice without finish()")
        names = [n for n, _ in named_grads]
        grads = [g for _, g in named_grads]
        if self.iteration < self.config.start_iter:
            buffers = [g.detach().clone() for g in grads]
            handle = ops.grouped_allreduce_async_(buffers, name=f"{self.name}.plain", op=self.op,
                                                  process_set=self.process_set)
            self._pending = ("plain", names, grads, buffers, handle, None)
            return
        matrices = []
        for name, g in zip(names, grads):
            # The gradient's own storage is reused (it becomes the error buffer in finish(); the optimizer
            # gets the approximation as a new tensor): no copy of the gradients, which on a 2-core machine
            # costs as much as the compression saves.
            m = g.detach().reshape(g.shape[0], -1)
            if m.dtype != _work_dtype(m.dtype) or not m.is_contiguous():
                m = m.to(_work_dtype(m.dtype), memory_format=torch.contiguous_format, copy=True)
            if self.config.use_error_feedback and name in self.errors:
                m += self.errors[name]
            matrices.append(m)
        # (Q^T M^T)^T and (P^T M)^T below: the same products, several times faster in CPU BLAS than M Q and
        # M^T P with a skinny right-hand side (measured 0.8 vs 1.8 ms and 0.4 vs 5.3 ms at 1024 x 1024, r=4).
        ps = [(self._q(name, m).t() @ m.t()).t() for name, m in zip(names, matrices)]
        flat = torch.cat([p.reshape(-1) for p in ps])
        handle = ops.allreduce_async_(flat, name=f"{self.name}.P", op=_api.Sum, process_set=self.process_set)
        self._pending = ("low_rank", names, grads, matrices, handle, flat)

    def finish(self):
        """Waits for this step's allreduces; returns the reduced gradients, in begin()'s order."""
        kind, names, grads, matrices, handle, flat = self._pending
        try:
            ops.synchronize(handle)
            if kind == "plain":
                return matrices
            ps = [orthonormalize(p.reshape(m.shape[0], -1), self.config.orthogonalization_epsilon)
                  for p, m in zip(torch.split(flat, [m.shape[0] * self._rank(m) for m in matrices]), matrices)]
            qs = [(p.t() @ m).t() for m, p in zip(matrices, ps)]
            flat_q = torch.cat([q.reshape(-1) for q in qs])
            ops.synchronize(ops.allreduce_async_(flat_q, name=f"{self.name}.Q", op=self.op,
                                                 process_set=self.process_set))
            qs = [q.reshape(q_old.shape) for q, q_old in
                  zip(torch.split(flat_q, [q.numel() for q in qs]), qs)]
            share = len(self.process_set.ranks) if self.op == _api.Sum else 1
            out = []
            for name, g, m, p, q in zip(names, grads, matrices, ps, qs):
                approx = p @ q.t()
                if self.config.use_error_feedback:
                    self.errors[name] = m.addmm_(p, q.t(), alpha=-1.0 / share)   # m - approx / share, in place
                if self.config.warm_start:
                    self.qs[name] = q
                out.append(approx.reshape(g.shape).to(g.dtype))
            return out
        finally:
            self._pending = None
            self.iteration += 1

    def abandon(self):
        """After a failed step: wait out the in-flight request and forget the step (the state is kept)."""
        if self._pending is not None:
            try:
                ops.synchronize(self._pending[4])
            except Exception:  # noqa: BLE001 -- failed or done: either way nothing is in flight any more
                pass
            self._pending = None

    def _rank(self, m):
        return min(self.config.rank, m.shape[0], m.shape[1])

    def _q(self, name, m):
        q = self.qs.get(name)
        r = self._rank(m)
        if q is None or q.shape != (m.shape[1], r):
            # The same seed on every rank gives the same Q without communication.
            seed = zlib.crc32(name.encode()) ^ self.config.seed
            if not self.config.warm_start:
                seed ^= zlib.crc32(str(self.iteration).encode())
            g = torch.Generator().manual_seed(seed)
            q = torch.randn(m.shape[1], r, generator=g, dtype=torch.float64).to(m.dtype).to(m.device)
        return q.to(m.dtype)

    def state_dict(self):
        return {"iteration": self.iteration, "qs": {k: v.clone() for k, v in self.qs.items()},
                "errors": {k: v.clone() for k, v in self.errors.items()}}

    def load_state_dict(self, state):
        self.abandon()
        self.iteration = int(state["iteration"])
        self.qs = {k: v.clone() for k, v in state.get("qs", {}).items()}
        self.errors = {k: v.clone() for k, v in state.get("errors", {}).items()}
