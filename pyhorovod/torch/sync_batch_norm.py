"""SyncBatchNorm: batch normalisation whose statistics cover the batch of every rank, on CPU tensors too
(Horovod's and torch's use CUDA-only kernels; this one is plain torch arithmetic).

Forward: each rank sends (n_k, sum_k, M2_k) per channel -- its element count, sum, and sum of squared
deviations from its own mean -- in one allgather, and every rank combines them with Chan et al.'s
parallel-variance formula: mean = sum_k sum_k / N, M2 = sum_k M2_k + sum_k n_k (mean_k - mean)^2. That is
numerically stable (no E[x^2] - E[x]^2 cancellation) and lets ranks have different batch sizes, even 0.
Normalisation uses the biased variance M2/N; the running variance gets the unbiased M2/(N-1).

Backward (each rank's loss L_k; as torch.nn.SyncBatchNorm): with xmu = x - mean and invstd =
1/sqrt(var + eps), the per-channel sums of dy and dy*xmu are allreduced (Sum) and
  dx = weight * invstd * (dy - sum(dy)/N - xmu * invstd^2 * sum(dy*xmu)/N),
which is d(sum_k L_k)/dx. weight/bias gradients stay local (sum(dy*xhat), sum(dy)); DistributedOptimizer
averages them like any other gradient. Together this equals one process normalising the whole batch.
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from pyhorovod import _api, basics
from pyhorovod.process_sets import global_process_set
from pyhorovod.torch import ops


def _stat_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _per_channel(t):
    """[N, C, *] -> [C, N * prod(*)] (the elements each channel's statistics run over)."""
    return t.transpose(0, 1).reshape(t.shape[1], -1)


def _view(v, x):
    return v.view((1, -1) + (1,) * (x.dim() - 2))


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        sd = _stat_dtype(x)
        xc = _per_channel(x.detach()).to(sd)
        c, n_local = xc.shape
        local_sum = xc.sum(1)
        local_mean = local_sum / max(n_local, 1)
        local_m2 = (xc - local_mean[:, None]).pow(2).sum(1)
        stats = torch.cat([torch.tensor([float(n_local)], dtype=sd), local_sum, local_m2]).view(1, -1)
        gathered = ops.synchronize(ops.allgather_async(stats, process_set=process_set))
        counts, sums, m2s = gathered[:, 0], gathered[:, 1:1 + c], gathered[:, 1 + c:]
        total = float(counts.sum())
        if total == 0:
            raise ValueError("SyncBatchNorm: every rank's batch is empty")
        mean = sums.sum(0) / total
        means_k = sums / counts.clamp(min=1)[:, None]
        m2 = m2s.sum(0) + (counts[:, None] * (means_k - mean).pow(2)).sum(0)
        var = m2 / total
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None and momentum > 0:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None and momentum > 0:
            unbiased = m2 / (total - 1) if total > 1 else var
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        xmu = x.detach().to(sd) - _view(mean, x)
        y = xmu * _view(invstd, x)
        if weight is not None:
            y = y * _view(weight.detach().to(sd), x)
        if bias is not None:
            y = y + _view(bias.detach().to(sd), x)
        ctx.save_for_backward(xmu, weight, invstd)
        ctx.total, ctx.process_set, ctx.has_bias = total, process_set, bias is not None
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xmu, weight, invstd = ctx.saved_tensors
        dyc = dy.to(xmu.dtype)
        sum_dy = _per_channel(dyc).sum(1)
        sum_dy_xmu = _per_channel(dyc * xmu).sum(1)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            both = torch.cat([sum_dy, sum_dy_xmu])
            both = ops.synchronize(ops.allreduce_async_(both, op=_api.Sum, process_set=ctx.process_set))
            c = sum_dy.numel()
            g_dy, g_dy_xmu = both[:c] / ctx.total, both[c:] / ctx.total
            scale = invstd if weight is None else invstd * weight.detach().to(invstd.dtype)
            grad_x = (_view(scale, dyc) * (dyc - _view(g_dy, dyc) - xmu * _view(invstd.pow(2) * g_dy_xmu, dyc)))
            grad_x = grad_x.to(dy.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_w = (sum_dy_xmu * invstd).to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = sum_dy.to(weight.dtype if weight is not None else dy.dtype)
        return grad_x, grad_w, grad_b, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation whose training-mode statistics cover the batches of every rank of the set.

    A drop-in for ``torch.nn.BatchNorm1d``, ``2d`` and ``3d`` (input ``[N, C, *]``): in training mode
    the mean and variance of each channel are computed over the inputs of all ranks of ``process_set``
    (the ranks may have different batch sizes), and the backward pass reduces the gradient statistics the
    same way. Evaluation mode, or a set of one rank, is plain batch norm. Unlike Horovod's, it also works
    on CPU tensors.

    Args:
        num_features: the number of channels C.
        eps: added to the variance for numerical stability.
        momentum: the running statistics' update factor.
        affine: learn a per-channel scale and shift.
        track_running_stats: keep running mean and variance for evaluation mode.
        process_set: the ranks whose batches the statistics cover (default: all).

    Raises:
        ValueError: an input with fewer than 2 dimensions.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats or len(self.process_set.ranks) <= 1 or basics.size() == 1:
            return F.batch_norm(input, self.running_mean if not self.training or self.track_running_stats
                                else None,
                                self.running_var if not self.training or self.track_running_stats else None,
                                self.weight, self.bias, use_batch_stats, factor, self.eps)
        running = self.training and self.track_running_stats
        return _SyncBatchNormFn.apply(input, self.weight, self.bias,
                                      self.running_mean if running else None,
                                      self.running_var if running else None, self.eps, factor,
                                      self.process_set)
