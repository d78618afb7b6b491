"""DistributedOptimizer: n ranks training on shards equal one process training on the whole batch
(plain, backward_passes_per_step=2, fp16 and bf16 compression, groups, predivide, op=Sum, sparse gradients),
Horovod's error rules, the LR scaling/warmup it applies itself, and the noise-scale extension point.
One launch per world size runs every section; each test checks its section."""
import json

import pytest

import torch_launch
from mp import run_ranks

K_STEPS = 3
LOCAL_BATCH = 4


def _model(dtype):
    import torch
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(dtype)


def _data(n, micro, dtype):
    """The global batch of each step: [K_STEPS][micro][n * LOCAL_BATCH] rows, the same on every rank."""
    import torch
    g = torch.Generator().manual_seed(99)
    return [[(torch.randn(n * LOCAL_BATCH, 5, generator=g, dtype=torch.float64).to(dtype),
              torch.randn(n * LOCAL_BATCH, 3, generator=g, dtype=torch.float64).to(dtype))
             for _ in range(micro)] for _ in range(K_STEPS)]


def _train(hvd, dtype=None, micro=1, distributed=True, make_opt=None, groups_of=None, wrap=True, **kw):
    """K_STEPS steps; returns the final parameters. Rank r uses rows [r*B, (r+1)*B) of each micro-batch;
    each micro-batch loss is scaled by 1/micro so that the sum over micro-batches is the mean."""
    import torch
    dtype = dtype or torch.float64
    r, n = (hvd.rank(), hvd.size()) if distributed else (0, 1)
    model = _model(dtype)
    opt = (make_opt or (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)))(model.parameters())
    if groups_of is not None:
        kw["groups"] = groups_of(model)
    if distributed and wrap:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       backward_passes_per_step=micro, **kw)
    for step_batches in _data(hvd.size(), micro, dtype):
        opt.zero_grad()
        for x, y in step_batches:
            if distributed:
                x, y = x[r * LOCAL_BATCH:(r + 1) * LOCAL_BATCH], y[r * LOCAL_BATCH:(r + 1) * LOCAL_BATCH]
            loss = torch.nn.functional.mse_loss(model(x), y) / micro
            loss.backward()
        opt.step()
    return [p.detach().double() for p in model.parameters()], opt


def _maxdiff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def section_equivalence(hvd):
    import torch
    out = {}
    ref1, _ = _train(hvd, distributed=False)
    ref2, _ = _train(hvd, micro=2, distributed=False)
    ref32, _ = _train(hvd, dtype=torch.float32, distributed=False)
    out["plain"] = _maxdiff(_train(hvd)[0], ref1)
    # control: the same shards without DistributedOptimizer must differ (the comparison can fail)
    out["control"] = _maxdiff(_train(hvd, wrap=False)[0], ref1)
    out["bpps2"] = _maxdiff(_train(hvd, micro=2)[0], ref2)
    out["fp16"] = _maxdiff(_train(hvd, dtype=torch.float32, compression=hvd.Compression.fp16)[0], ref32)
    out["bf16"] = _maxdiff(_train(hvd, dtype=torch.float32, compression=hvd.Compression.bf16)[0], ref32)
    out["groups2"] = _maxdiff(_train(hvd, groups=2)[0], ref1)
    # two explicit groups (first layer, last bias); the last weight stays alone
    out["groups_list"] = _maxdiff(_train(hvd, groups_of=lambda m: [[m[0].weight, m[0].bias], [m[2].bias]])[0],
                                  ref1)
    out["predivide"] = _maxdiff(_train(hvd, gradient_predivide_factor=2.0)[0], ref1)
    n = hvd.size()
    summed = lambda ps: torch.optim.SGD(ps, lr=0.1 / n, momentum=0.9)  # noqa: E731 -- Sum = n x Average
    out["op_sum"] = _maxdiff(_train(hvd, make_opt=summed, op=hvd.Sum)[0], ref1)
    return out


def section_sparse_and_missing(hvd):
    """Sparse embedding gradients (allgather path and sparse_as_dense) and a parameter that only rank 0
    uses (the others send zeros): compared with the averaged gradient computed by hand."""
    import torch
    r, n = hvd.rank(), hvd.size()
    res = {}
    for dense in (False, True):
        torch.manual_seed(5)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        extra = torch.nn.Parameter(torch.ones(2))
        w0 = emb.weight.detach().clone()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(list(emb.parameters()) + [extra], lr=1.0),
                                       named_parameters=[("emb", emb.weight), ("extra", extra)],
                                       sparse_as_dense=dense)
        idx = torch.tensor([r % 10, (3 * r + 1) % 10, 7])
        loss = emb(idx).sum() * (r + 1)
        if r == 0:
            loss = loss + (extra * 3).sum()
        loss.backward()
        opt.step()
        exp = w0.clone()
        for k in range(n):
            for i in [k % 10, (3 * k + 1) % 10, 7]:
                exp[i] -= (k + 1) / n
        res[f"sparse dense={dense}"] = float((emb.weight.detach() - exp).abs().max())
        res[f"missing grad dense={dense}"] = float((extra.detach() - (1 - 3.0 / n)).abs().max())
    return res


def _expect_error(fn, exc, fragment):
    try:
        fn()
    except exc as e:
        return "ok" if fragment in str(e) else f"message {str(e)!r}"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return "no error"


def section_errors(hvd):
    import warnings
    import torch
    model = _model(torch.float64)
    named = list(model.named_parameters())
    sgd = lambda: torch.optim.SGD(model.parameters(), lr=0.1)  # noqa: E731
    res = {
        "duplicates": _expect_error(lambda: hvd.DistributedOptimizer(sgd(),
                                                                     named_parameters=[named[0], named[0]] + named[1:]),
                                    ValueError, "repeated: 0.weight"),
        "unnamed": _expect_error(lambda: hvd.DistributedOptimizer(sgd(), named_parameters=named[1:]),
                                 ValueError, "leaves out parameters"),
        "not tuples": _expect_error(lambda: hvd.DistributedOptimizer(sgd(), named_parameters=[p for _, p in named]),
                                    ValueError, "expected (name, parameter) pairs"),
        "bpps": _expect_error(lambda: hvd.DistributedOptimizer(sgd(), backward_passes_per_step=0),
                              ValueError, "expected a positive integer"),
        "predivide": _expect_error(lambda: hvd.DistributedOptimizer(sgd(), op=hvd.Sum, gradient_predivide_factor=2.0),
                                   ValueError, "needs op=Average"),
        "groups": _expect_error(lambda: hvd.DistributedOptimizer(sgd(), groups=-1), ValueError,
                                "expected a positive number of groups"),
        "groups twice": _expect_error(lambda: hvd.DistributedOptimizer(sgd(), groups=[[named[0][1], named[0][1]]]),
                                      ValueError, "more than one place"),
        "lr rule": _expect_error(lambda: hvd.DistributedOptimizer(sgd(), lr_scaling="cubic"), ValueError, "lr_scaling"),
        "warmup without rule": _expect_error(lambda: hvd.DistributedOptimizer(sgd(), warmup_steps=3), ValueError,
                                             "need lr_scaling"),
        "noise without batch": _expect_error(lambda: hvd.DistributedOptimizer(sgd(), measure_noise_scale=True),
                                             ValueError, "needs batch_size"),
    }
    if hvd.size() > 1:  # hooks (and so these rules) exist only with several ranks, as in Horovod
        opt = hvd.DistributedOptimizer(sgd(), named_parameters=named)
        x = torch.ones(2, 5, dtype=torch.float64)
        model(x).sum().backward()
        res["zero_grad race"] = _expect_error(opt.zero_grad, AssertionError, "zero_grad() while the gradients "
                                              "of the last backward() are still being allreduced")
        res["backward twice"] = _expect_error(lambda: model(x).sum().backward(), AssertionError,
                                              "backward() ran more than backward_passes_per_step=1 time(s) "
                                              "before step()")
        opt.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt.step()
        res["step after synchronize warns"] = "ok" if any("skip_synchronize" in str(w.message) for w in caught) \
            else "no warning"
        opt.zero_grad()
        model(x).sum().backward()
        opt.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with opt.skip_synchronize():
                opt.step()
        res["skip_synchronize silent"] = "ok" if not caught else str(caught[0].message)
        res["allreduce starts during backward"] = _overlap_check(hvd)
    return res


def _overlap_check(hvd):
    """The allreduce of a late layer's gradient must be in flight while backward still runs through an
    earlier layer: a probe Function placed before the first layer looks at the optimizer's handles from
    inside its backward (which autograd runs after the later layers' gradients are accumulated)."""
    import torch
    seen = {}

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            seen["in flight"] = sorted(k for k, (h, _) in opt._handles.items() if h is not None
                                       for k in [opt._parameter_names[k]])
            return g

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x = torch.ones(3, 4, requires_grad=True)
    model(Probe.apply(x)).sum().backward()
    opt.step()
    return "ok" if {"0.weight", "2.weight", "2.bias"} <= set(seen.get("in flight", [])) else str(seen)


def section_lr_scaling(hvd):
    """lr_scaling='linear' with warmup over 4 steps: factor n, LR 0.1 -> 0.1 n; plain SGD so each update
    is -lr_t x (averaged gradient), checked against the same run with the LR set by hand."""
    import torch
    n = hvd.size()
    seen = []
    params, opt = _train(hvd, make_opt=lambda ps: torch.optim.SGD(ps, lr=0.1), lr_scaling="linear",
                         warmup_steps=4)
    seen = [opt.param_groups[0]["lr"], opt.lr_step, opt.applied_lr()[0]]

    class Manual(torch.optim.SGD):
        t = 0

        def step(self, closure=None):
            self.param_groups[0]["lr"] = 0.1 * (1 + (n - 1) * min(Manual.t / 4, 1))
            Manual.t += 1
            return super().step(closure)

    manual, _ = _train(hvd, make_opt=lambda ps: Manual(ps, lr=0.1))
    sizes, _ = _train(hvd, make_opt=lambda ps: torch.optim.SGD(ps, lr=0.1), lr_scaling="sqrt",
                      base_batch_size=LOCAL_BATCH, batch_size=LOCAL_BATCH * 4, warmup_steps=0)
    return {"diff": _maxdiff(params, manual), "group lr kept": seen[0], "lr_step": seen[1],
            "last applied": seen[2], "expected last": 0.1 * (1 + (n - 1) * min((K_STEPS - 1) / 4, 1)),
            "sqrt finite": all(bool(torch.isfinite(p).all()) for p in sizes)}


def section_noise_tap(hvd):
    """measure_noise_scale=True hands (mean_k |g_k|^2, |mean g|^2, lr) to the estimator once per step
    (pyhorovod/torch/noise_tap.py); the values are recorded by wrapping the estimator's update()."""
    import torch
    from pyhorovod.scaling import noise_scale
    calls = []
    original = noise_scale.NoiseScaleEstimator.update

    def recording_update(self, local_sq_mean, global_sq, lr=None, grad_scale=None):
        calls.append((float(sum(local_sq_mean)), float(sum(global_sq)), lr, self.b_small, self.b_big))
        return original(self, local_sq_mean, global_sq, lr, grad_scale)

    noise_scale.NoiseScaleEstimator.update = recording_update
    try:
        r, n = hvd.rank(), hvd.size()
        model = torch.nn.Linear(3, 2).double()
        torch.nn.init.constant_(model.weight, 0.5)
        torch.nn.init.constant_(model.bias, 0.0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.2),
                                       named_parameters=model.named_parameters(), measure_noise_scale=True,
                                       batch_size=2, backward_passes_per_step=1)
        xs = [torch.full((2, 3), float(k + 1), dtype=torch.float64) for k in range(n)]
        model(xs[r]).pow(2).sum().backward()
        opt.step()
    finally:
        noise_scale.NoiseScaleEstimator.update = original
    # by hand: the gradient of sum((W x + b)^2) for rank k's batch
    grads = []
    for k in range(n):
        m = torch.nn.Linear(3, 2).double()
        torch.nn.init.constant_(m.weight, 0.5)
        torch.nn.init.constant_(m.bias, 0.0)
        m(xs[k]).pow(2).sum().backward()
        grads.append(torch.cat([m.weight.grad.reshape(-1), m.bias.grad]))
    local_sq = sum(float(g.pow(2).sum()) for g in grads) / n
    global_sq = float(torch.stack(grads).mean(0).pow(2).sum())
    return {"calls": calls, "exp_local_sq": local_sq, "exp_global_sq": global_sq,
            "report_is_dict": isinstance(opt.noise_scale_report(), dict)}


def body_all():
    import traceback
    import torch
    import pyhorovod.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    out = {}
    for name, fn in [("equivalence", section_equivalence), ("sparse_missing", section_sparse_and_missing),
                     ("errors", section_errors), ("lr", section_lr_scaling), ("noise", section_noise_tap)]:
        try:
            out[name] = fn(hvd)
        except Exception:  # noqa: BLE001 -- reported by the matching test
            out[name] = {"traceback": traceback.format_exc()}
    hvd.shutdown()
    return out


@pytest.fixture(scope="module", params=[1, 2, 3])
def launched(request):
    # One launch per world size shared with the other torch test files (tests/torch_launch.py).
    return torch_launch.launched(request.param, "optimizer")


def _sections(launched, name):
    size, results = launched
    assert len(results) == size
    for res in results:
        sec = res.value[name]
        assert "traceback" not in sec, f"rank {res.rank}:\n{sec['traceback']}\n{res.stderr[-3000:]}"
        yield res.rank, sec


def test_training_equals_one_process_on_concatenated_batch(launched):
    for rank, d in _sections(launched, "equivalence"):
        msg = f"rank {rank}: {json.dumps(d)}"
        for key in ("plain", "bpps2", "groups2", "groups_list", "predivide", "op_sum"):
            assert d[key] < 1e-12, msg
        assert d["fp16"] < 2e-3, msg
        assert d["bf16"] < 2e-2, msg   # 8 significant bits instead of fp16's 11
        assert d["control"] > 1e-3 if launched[0] > 1 else d["control"] == 0, msg


def test_sparse_gradients_and_parameters_without_gradient(launched):
    for rank, d in _sections(launched, "sparse_missing"):
        for key, v in d.items():
            assert v < 1e-6, f"rank {rank}: {key}: {v}"


def test_errors_and_synchronize_rules(launched):
    size = launched[0]
    for rank, d in _sections(launched, "errors"):
        assert all(v == "ok" for v in d.values()), f"rank {rank}: {d}"
        assert len(d) == (15 if size > 1 else 10)


def test_lr_scaling_and_warmup_applied_by_optimizer(launched):
    size, results = launched
    for rank, d in _sections(launched, "lr"):
        assert d["diff"] < 1e-12, d
        assert d["group lr kept"] == 0.1 and d["lr_step"] == K_STEPS and d["sqrt finite"], d
        assert d["last applied"] == pytest.approx(d["expected last"], rel=1e-12)
    assert "lr_scaling=linear" in results[0].stderr
    assert all("lr_scaling=" not in res.stderr for res in results[1:])


def test_noise_scale_extension_point(launched):
    size = launched[0]
    for rank, d in _sections(launched, "noise"):
        assert len(d["calls"]) == 1, d
        local_sq, global_sq, lr, b_small, b_big = d["calls"][0]
        assert (b_small, b_big) == ((2, 2 * size) if size > 1 else (2, 2)), d
        assert lr == 0.2 and d["report_is_dict"], d
        if size > 1:  # one worker with one micro-batch: the estimator gets no A_s (it cannot estimate)
            assert local_sq == pytest.approx(d["exp_local_sq"], rel=1e-6), d
            assert global_sq == pytest.approx(d["exp_global_sq"], rel=1e-12), d


def test_fashion_mnist_example_trains_and_resumes(tmp_path):
    """examples/fashion_mnist.py on 2 ranks, a small slice: one epoch, then a second launch that resumes
    from the checkpoint at epoch 2 (as after a restart); loss and the scaled LR are checked."""
    ckpt = str(tmp_path / "ckpt")
    common = ["--limit", "2048", "--batch-size", "64", "--warmup-epochs", "0.5", "--checkpoint-dir", ckpt]
    first = run_ranks("examples/fashion_mnist.py", 2, timeout=240,
                      args=common + ["--epochs", "1", "--metrics-json", str(tmp_path / "m1.json")])
    assert "starting at epoch 1" in first[0].stdout and "epoch 1/1:" in first[0].stdout, first[0].stdout
    assert "epoch 1/1" not in first[1].stdout and "lr_scaling" not in first[1].stderr  # rank 0 only
    second = run_ranks("examples/fashion_mnist.py", 2, timeout=240, env={"PYHOROVOD_RESTART_COUNT": "1"},
                       args=common + ["--epochs", "2", "--metrics-json", str(tmp_path / "m2.json")])
    assert "restart 1" in second[0].stdout and "starting at epoch 2" in second[0].stdout, second[0].stdout
    m1 = json.loads((tmp_path / "m1.json").read_text())["history"]
    m2 = json.loads((tmp_path / "m2.json").read_text())["history"]
    assert [h["epoch"] for h in m1] == [1] and [h["epoch"] for h in m2] == [2]
    # linear rule: 0.05 per 64 examples, global batch 2 x 64 = 128 -> 0.1 after the warmup
    assert m1[0]["lr"] == pytest.approx(0.1) and m2[0]["lr"] == pytest.approx(0.1)
    assert m2[0]["global_batch"] == 128
    assert m2[0]["train_loss"] < m1[0]["train_loss"] < 2.3
    assert m2[0]["test_acc"] > 0.3 and m2[0]["images_per_s"] > 0
