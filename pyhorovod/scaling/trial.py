"""The default steps-to-result trial: a small model trained on Fashion-MNIST (fmnist.py) with SGD.

Inputs are pooled (fmnist.features) and standardised, which keeps a trial cheap enough that a whole
sweep runs in minutes on two cores; the statistics the sweep is about (how steps-to-result change with
batch size) do not need full resolution. The t10k split serves as the validation set (its first
`n_val` images).

A trial is a callable trial(batch_size, hparams, max_steps, report): it trains from scratch and calls
report(step, metric, b_simple) after each evaluation, stopping as soon as report returns False. A user's
own training function for the sweep has the same signature.

In-process data parallelism. With measure_workers = K >= 2 each step's batch is cut into K equal
"worker" shards; each shard's gradient is computed by its own backward pass, |g_k|^2 is taken, and the
mean of the K gradients is the step's update -- exactly the arithmetic of K data-parallel workers, so
NoiseScaleEstimator(B/K, B) measures the live noise scale without any communication.
"""
import math

import torch

from .fmnist import DATA_DIR, features, load_fashion_mnist
from .noise_scale import NoiseScaleEstimator


class FashionMnistTrial:
    """The default sweep trial: an MLP (hidden=0: softmax regression) trained with SGD.

    optimizer: "sgd", "momentum" or "nesterov". hparams: lr, momentum (ignored by "sgd"), decay_fraction
    and final_lr_fraction of a linear decay lr(t) = lr (1 - (1 - final) min(t, T)/T), T = decay_fraction
    x max_steps. metric: "loss" (validation cross-entropy) or "error" (validation error rate).
    """

    def __init__(self, optimizer="momentum", hidden=64, pool=2, n_train=None, n_val=5000, metric="loss",
                 data_dir=DATA_DIR, seed=0, eval_growth=1.06, measure_workers=0, ema_beta=0.95):
        if optimizer not in ("sgd", "momentum", "nesterov"):
            raise ValueError(f"optimizer must be sgd, momentum or nesterov, got {optimizer!r}")
        if metric not in ("loss", "error"):
            raise ValueError(f"metric must be 'loss' or 'error', got {metric!r}")
        if measure_workers == 1 or measure_workers < 0:
            raise ValueError(f"measure_workers must be 0 (off) or >= 2, got {measure_workers}")
        x, y = load_fashion_mnist("train", data_dir)
        xv, yv = load_fashion_mnist("test", data_dir)
        x, xv = features(x, pool), features(xv[:n_val], pool)
        if n_train:
            x, y = x[:n_train], y[:n_train]
        mean, std = x.mean(axis=0), x.std(axis=0) + 1e-3
        self.x = torch.from_numpy((x - mean) / std)
        self.y = torch.from_numpy(y)
        self.xv = torch.from_numpy((xv - mean) / std)
        self.yv = torch.from_numpy(yv[:n_val])
        self.optimizer, self.hidden, self.metric = optimizer, hidden, metric
        self.seed, self.eval_growth = seed, eval_growth
        self.measure_workers, self.ema_beta = measure_workers, ema_beta
        self.name = f"fashion-mnist pool{pool} " + (f"mlp{hidden}" if hidden else "softmax") + f" {optimizer}"

    def model(self):
        d = self.x.shape[1]
        if self.hidden:
            return torch.nn.Sequential(torch.nn.Linear(d, self.hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(self.hidden, 10))
        return torch.nn.Linear(d, 10)

    def evaluate(self, model):
        with torch.no_grad():
            out = model(self.xv)
            if self.metric == "loss":
                return float(torch.nn.functional.cross_entropy(out, self.yv))
            return float((out.argmax(dim=1) != self.yv).float().mean())

    def _batches(self, batch_size, gen):
        n = len(self.x)
        while True:
            perm = torch.randperm(n, generator=gen)
            for i in range(0, n - batch_size + 1, batch_size):
                yield perm[i: i + batch_size]

    def __call__(self, batch_size, hparams, max_steps, report):
        torch.manual_seed(self.seed)
        gen = torch.Generator().manual_seed(self.seed + 1)
        model = self.model()
        params = list(model.parameters())
        mom = 0.0 if self.optimizer == "sgd" else float(hparams.get("momentum", 0.9))
        opt = torch.optim.SGD(params, lr=hparams["lr"], momentum=mom, nesterov=self.optimizer == "nesterov")
        decay_steps = max(1, int(hparams.get("decay_fraction", 1.0) * max_steps))
        final = float(hparams.get("final_lr_fraction", 1.0))
        k = self.measure_workers
        est = NoiseScaleEstimator(batch_size // k, (batch_size // k) * k, self.ema_beta) if k else None
        next_eval, batches = 1.0, self._batches(batch_size, gen)
        for step in range(1, max_steps + 1):
            lr = hparams["lr"] * (1.0 - (1.0 - final) * min(step - 1, decay_steps) / decay_steps)
            for g in opt.param_groups:
                g["lr"] = lr
            idx = next(batches)
            if est is None:
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(self.x[idx]), self.y[idx]).backward()
            else:
                self._worker_step(model, params, idx, k, est, lr)
            opt.step()
            if step >= next_eval or step == max_steps:
                next_eval = max(step + 1, step * self.eval_growth)
                metric = self.evaluate(model)
                if not math.isfinite(metric) or (self.metric == "loss" and metric > 10.0):
                    return  # diverged
                if not report(step, metric, est.b_simple() if est else None):
                    return

    def _worker_step(self, model, params, idx, k, est, lr):
        """K shards, one backward each: A_s = mean |g_k|^2, A_b = |mean g_k|^2 (module doc)."""
        shard = len(idx) // k
        total = [torch.zeros_like(p) for p in params]
        local_sq = 0.0
        for w in range(k):
            sl = idx[w * shard: (w + 1) * shard]
            grads = torch.autograd.grad(
                torch.nn.functional.cross_entropy(model(self.x[sl]), self.y[sl]), params)
            local_sq += sum(float(g.pow(2).sum()) for g in grads) / k
            for t, g in zip(total, grads):
                t.add_(g, alpha=1.0 / k)
        for p, t in zip(params, total):
            p.grad = t
        est.update(local_sq, sum(float(t.pow(2).sum()) for t in total), lr)
