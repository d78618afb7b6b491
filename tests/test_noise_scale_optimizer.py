"""End to end: DistributedOptimizer(measure_noise_scale=True) against values computed by hand.

Every rank trains one step of a small model on its shard and also computes, with torch.autograd.grad
(which does not fire the optimizer's hooks), every shard's gradient, hence the exact A_s = mean_k |g_k|^2
and A_b = |mean_k g_k|^2 the estimator must have received. After one step the bias-corrected EMAs equal
the step's unbiased estimates, so the report must match them to float32 rounding. Covered: workers with
gradient accumulation, clipping between synchronize() and step() (norms are taken before clipping), an
AMP-style loss scale undone with estimator.grad_scale, per-parameter-group statistics, one worker using
its micro-batches, one worker with one micro-batch (cannot estimate), and lr_scaling="adascale".
"""
import numpy as np
import pytest

from pyhorovod.scaling.noise_scale import unbiased_estimates
from test_noise_scale import budget, hard_timeout  # noqa: F401  (the autouse hard timeout fixture)


def dist_body(configs):
    """For each (bpps, clip, per_group, amp_scale): one training step of a fresh model, each rank on its
    shard; every rank also computes the expected A_s, A_b from all shards with autograd.grad (which does
    not fire the optimizer's hooks). The loss is divided by bpps, as Horovod's examples do."""
    import pyhorovod.torch as hvd
    hvd.init()
    return {"steps": [_one_step(hvd, *c) for c in configs], "every": _measured_steps_with_every(hvd, 2)}


def _measured_steps_with_every(hvd, every):
    """PYHOROVOD_NOISE_SCALE_EVERY=2 over 5 steps: steps 0, 2, 4 are measured."""
    import os
    import torch
    os.environ["PYHOROVOD_NOISE_SCALE_EVERY"] = str(every)
    try:
        model = torch.nn.Linear(3, 2)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), batch_size=2,
                                       named_parameters=model.named_parameters(), measure_noise_scale=True)
    finally:
        del os.environ["PYHOROVOD_NOISE_SCALE_EVERY"]
    for i in range(5):
        opt.zero_grad()
        model(torch.full((2, 3), float(hvd.rank() + i))).pow(2).sum().backward()
        opt.step()
    return opt.noise_scale_report()["step"]


def _one_step(hvd, bpps, clip, per_group, amp_scale, adascale=False):
    import torch
    r, n, b = hvd.rank(), hvd.size(), 4
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    base = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.05}],
                           lr=0.1)
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters(), batch_size=b,
                                   measure_noise_scale="per_group" if per_group else True,
                                   backward_passes_per_step=bpps, lr_scaling="adascale" if adascale else None)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(n * bpps * b, 5, generator=gen), torch.randint(0, 3, (n * bpps * b,), generator=gen)

    def micro_grads(j):   # per group, the mean gradient of micro-batch j (global index)
        rows = slice(j * b, (j + 1) * b)
        gr = torch.autograd.grad(torch.nn.functional.cross_entropy(model(x[rows]), y[rows]),
                                 list(model.parameters()))
        return [torch.cat([g.double().reshape(-1) for g in gr[:2]]),
                torch.cat([g.double().reshape(-1) for g in gr[2:]])]
    micro = [micro_grads(j) for j in range(n * bpps)]
    opt.zero_grad()
    if amp_scale:     # gradients of a scaled loss, as under AMP before unscale_
        opt.noise_scale_estimator.grad_scale = amp_scale
    for j in range(bpps):
        rows = slice((r * bpps + j) * b, (r * bpps + j + 1) * b)
        loss = torch.nn.functional.cross_entropy(model(x[rows]), y[rows]) / bpps
        (loss * (amp_scale or 1.0)).backward()
    opt.synchronize()
    if clip:   # clipping after synchronize must not change the measurement (norms before clipping)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    with opt.skip_synchronize():
        opt.step()
    if n > 1:   # workers: g_k = mean of worker k's micro-batch gradients
        units = [[sum(micro[k * bpps + j][g] for j in range(bpps)) / bpps for g in (0, 1)] for k in range(n)]
    else:       # micro-batches, in the units of the accumulated gradient (loss / bpps): g_j / bpps
        units = [[micro[j][g] / bpps for g in (0, 1)] for j in range(bpps)]
    a_s = [float(sum((u[g] ** 2).sum() for u in units) / len(units)) for g in (0, 1)]
    a_b = [float(((sum(u[g] for u in units) / len(units)) ** 2).sum()) for g in (0, 1)]
    return {"rep": opt.noise_scale_report(), "a_s": a_s, "a_b": a_b,
            "config": [bpps, per_group, clip, amp_scale, adascale],
            "applied_lr": opt.applied_lr()}


@pytest.mark.parametrize("size,configs", [
    # workers: accumulation + clipping + per group; AMP scale + AdaScale
    (2, [(2, True, True, None), (1, False, False, 1024.0, True)]),
    # one worker: micro-batches per group; a single gradient per step (cannot estimate)
    (1, [(2, False, True, None), (1, False, False, None)])])
@budget(150)
def test_distributed_optimizer_measures_the_exact_step_values(size, configs):
    from mp import run_ranks
    results = run_ranks(dist_body, size, timeout=120, args=(configs,))
    for res in results:
        assert res.value["every"] == (3 if size > 1 else 0)   # one worker, one micro-batch: no estimate
        for out in res.value["steps"]:
            (bpps, per_group, _, _, adascale), rep = out["config"], out["rep"]
            a_s, a_b = out["a_s"], out["a_b"]
            if size == 1 and bpps == 1:
                assert rep["available"] is False and rep["b_simple"] is None and "cannot" in rep["reason"]
                continue
            b_small, b_big = (4 * bpps, 4 * bpps * size) if size > 1 else (4, 4 * bpps)
            g, tr = unbiased_estimates(np.array(a_s), np.array(a_b), b_small, b_big)
            assert (rep["b_small"], rep["b_big"], rep["step"]) == (b_small, b_big, 1)
            assert rep["mode"] == ("workers" if size > 1 else "micro_batches")
            assert rep["grad_sq"] == pytest.approx(g.sum(), rel=1e-4, abs=1e-7)
            assert rep["trace_sigma"] == pytest.approx(tr.sum(), rel=1e-4)
            assert rep["temperature"] == pytest.approx(out["applied_lr"][0] / b_big)   # lr / B_big
            # AdaScale: no estimate before the first step, so the gain is s = 2 (the linear rule).
            assert out["applied_lr"] == pytest.approx([0.2, 0.1] if adascale else [0.1, 0.05])
            if per_group:
                for i, name in enumerate(["0", "1"]):
                    assert rep["groups"][name]["grad_sq"] == pytest.approx(g[i], rel=1e-4, abs=1e-7)
                    assert rep["groups"][name]["trace_sigma"] == pytest.approx(tr[i], rel=1e-4)


def steps_body(variants, steps):
    """For each variant, `steps` training steps of a fresh model on 2 ranks, recording what the optimizer
    fed the estimator (A_s, A_b) each step, next to the exact values from every shard's gradient."""
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    out = {}
    for variant in variants:
        torch.manual_seed(0)
        if variant == "sparse":   # the embedding's sparse gradient is the step's last: the tap's request
            model = torch.nn.Sequential(torch.nn.EmbeddingBag(20, 6, mode="mean", sparse=True),  # goes alone
                                        torch.nn.Linear(6, 3))
        else:
            model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        kw = {"fp16": {"compression": hvd.Compression.fp16}, "grouped": {"groups": 2},
              "plain": {}, "sparse": {}}[variant]
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), batch_size=4,
                                       named_parameters=model.named_parameters(), measure_noise_scale=True,
                                       **kw)
        fed = []
        update = opt.noise_scale_estimator.update
        opt.noise_scale_estimator.update = lambda a_s, a_b, lr=None, **k: (fed.append((a_s, a_b)),
                                                                           update(a_s, a_b, lr, **k))[1]
        exact = []
        for step in range(steps):
            gen = torch.Generator().manual_seed(10 + step)
            x = (torch.randint(0, 20, (hvd.size() * 4, 3), generator=gen) if variant == "sparse"
                 else torch.randn(hvd.size() * 4, 6, generator=gen))
            y = torch.randint(0, 3, (hvd.size() * 4,), generator=gen)
            shards = []
            for k in range(hvd.size()):
                rows = slice(4 * k, 4 * k + 4)
                gr = torch.autograd.grad(torch.nn.functional.cross_entropy(model(x[rows]), y[rows]),
                                         list(model.parameters()))
                shards.append(torch.cat([(g.to_dense() if g.is_sparse else g).double().reshape(-1) for g in gr]))
            exact.append((float(sum((s ** 2).sum() for s in shards) / len(shards)),
                          float(((sum(shards) / len(shards)) ** 2).sum())))
            rows = slice(4 * hvd.rank(), 4 * hvd.rank() + 4)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
            opt.step()
        out[variant] = {"fed": [(list(a), list(b)) for a, b in fed], "exact": exact}
    return out


@budget(120)
def test_the_engine_sums_match_exact_values_step_after_step():
    """The engine takes |g|^2 as it enqueues each gradient and |G|^2 as it writes each result, and the
    tap's request goes out behind the last gradient; over several steps (the sums restart each step),
    with grouped allreduces, and with fp16 compression or a sparse gradient (the tap then takes those
    norms itself; a sparse last gradient sends the tap's request on its own)."""
    from mp import run_ranks
    results = run_ranks(steps_body, 2, timeout=100, args=(["plain", "grouped", "fp16", "sparse"], 3))
    for res in results:
        for variant, got in res.value.items():
            assert len(got["fed"]) == 3, variant
            rel = 2e-3 if variant == "fp16" else 1e-5   # fp16: the reduced gradient is rounded to fp16
            for (a_s, a_b), (e_s, e_b) in zip(got["fed"], got["exact"]):
                assert a_s == [pytest.approx(e_s, rel=1e-5)], variant   # A_s travels as float32
                assert a_b == [pytest.approx(e_b, rel=rel)], variant
