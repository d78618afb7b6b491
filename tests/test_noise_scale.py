"""Validation of the live noise scale (pyhorovod/scaling): unbiasedness against exact per-example
gradients, tracking of the ratio of EMAs on a real run, the sweep's fitted B_crit against the live
B_simple, and the advisor's and AdaScale's formulas on values worked out by hand.

Exact values. For softmax regression (logits z = W^T x, x with a constant-1 bias feature) one example's
gradient is the outer product x (p - y)^T, so over a finite data set taken as the population (batches
drawn uniformly with replacement) G = mean_i g_i and tr(Sigma) = mean_i |g_i|^2 - |G|^2 exactly, with
|g_i|^2 = |x_i|^2 |p_i - y_i|^2.
"""
import math
import os

import numpy as np
import pytest

from pyhorovod.scaling.adascale import AdaScale, AdaScalePolicy, adascale_gain, gain_from_noise_scale
from pyhorovod.scaling.advisor import Advisor, efficiency, regime, steps_ratio, workers_limit
from pyhorovod.scaling.noise_scale import NoiseScaleEstimator, _BiasCorrectedEMA, unbiased_estimates
from time_budget import budget, hard_timeout  # noqa: F401 -- hard_timeout: autouse fixture

DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
needs_data = pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist is not installed")


def softmax_per_example(w, x, onehot):
    """(x, p - y): the two factors of every example's gradient x (p - y)^T."""
    z = x @ w
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return x, p - onehot


def exact_stats(w, x, onehot):
    xi, r = softmax_per_example(w, x, onehot)
    g = xi.T @ r / len(x)
    grad_sq = float((g ** 2).sum())
    return grad_sq, float(((xi ** 2).sum(1) * (r ** 2).sum(1)).mean()) - grad_sq


def worker_norms(w, x, onehot, idx):
    """idx [K, b]: A_s = mean_k |g_k|^2 and A_b = |mean_k g_k|^2 of K workers' mean gradients."""
    gs = []
    for rows in idx:
        xi, r = softmax_per_example(w, x[rows], onehot[rows])
        gs.append(xi.T @ r / len(rows))
    gs = np.array(gs)
    return float((gs ** 2).sum(axis=(1, 2)).mean()), float((gs.mean(axis=0) ** 2).sum())


# ---- (a) unbiasedness ------------------------------------------------------------------------------

@pytest.mark.parametrize("workers,b", [(2, 8), (4, 16), (3, 5)])
def test_unbiased_against_exact_per_example_gradients(workers, b):
    rng = np.random.default_rng(100 + workers)
    n, d, c = 400, 12, 5
    x = np.hstack([rng.normal(size=(n, d - 1)), np.ones((n, 1))])
    onehot = np.eye(c)[rng.integers(0, c, n)]
    w = rng.normal(scale=0.4, size=(d, c))
    true_g, true_tr = exact_stats(w, x, onehot)
    draws = 3000
    est = np.array([unbiased_estimates(*worker_norms(w, x, onehot, rng.integers(0, n, (workers, b))),
                                       b, workers * b) for _ in range(draws)])
    for name, col, truth in (("|G|^2", 0, true_g), ("tr(Sigma)", 1, true_tr)):
        mean, se = est[:, col].mean(), est[:, col].std(ddof=1) / math.sqrt(draws)
        assert se < 0.15 * abs(truth), f"{name}: too few draws to test anything (se={se}, truth={truth})"
        assert abs(mean - truth) < 3 * se, f"{name}: mean {mean} vs exact {truth} (3 se = {3 * se})"
    # The same test catches the obvious biased estimator: |mean gradient|^2 overstates |G|^2 by tr/B_big.
    a_b = np.array([worker_norms(w, x, onehot, rng.integers(0, n, (workers, b)))[1] for _ in range(draws)])
    assert abs(a_b.mean() - true_g) > 3 * a_b.std(ddof=1) / math.sqrt(draws)


# ---- estimator arithmetic ---------------------------------------------------------------------------

def test_exact_values_and_bias_corrected_emas():
    est = NoiseScaleEstimator(2, 8, ema_beta=0.5)
    # |G|^2 = 3, tr = 10: A_s = 3 + 10/2 = 8, A_b = 3 + 10/8 = 4.25.
    g, tr = est.update(8.0, 4.25, lr=0.4)
    assert g[0] == pytest.approx(3.0) and tr[0] == pytest.approx(10.0)
    rep = est.report()
    assert rep["grad_sq"] == pytest.approx(3.0) and rep["trace_sigma"] == pytest.approx(10.0)
    assert rep["b_simple"] == pytest.approx(10.0 / 3.0)
    assert (rep["b_small"], rep["b_big"], rep["step"]) == (2, 8, 1)
    assert rep["temperature"] == pytest.approx(0.4 / 8)
    # Second step |G|^2 = 1, tr = 4 (A_s = 3, A_b = 1.5). beta = 0.5: corrected EMA = (0.25 x1 + 0.5 x2)/0.75.
    est.update(3.0, 1.5)
    rep = est.report()
    assert rep["grad_sq"] == pytest.approx((0.25 * 3 + 0.5 * 1) / 0.75)
    assert rep["trace_sigma"] == pytest.approx((0.25 * 10 + 0.5 * 4) / 0.75)
    assert rep["b_simple"] == pytest.approx(4.5 / 1.25)   # ratio of EMAs, not mean of ratios (3.67)
    assert rep["temperature"] == pytest.approx(0.05)      # the last lr given is kept


def test_negative_grad_sq_ema_gives_undefined_b_simple_and_nonfinite_inputs_are_skipped():
    est = NoiseScaleEstimator(4, 16, ema_beta=0.9)
    est.update(1.0, 0.1)              # |G|^2 = (16*0.1 - 4)/12 < 0
    assert est.report()["b_simple"] is None and est.report()["grad_sq"] < 0
    assert est.update(float("inf"), 1.0) is None and est.update(1.0, float("nan")) is None
    assert (est.step, est.skipped) == (1, 2)


def test_grad_scale_and_groups():
    plain, scaled = NoiseScaleEstimator(2, 8), NoiseScaleEstimator(2, 8)
    plain.update(8.0, 4.25)
    scaled.update(8.0 * 1024 ** 2, 4.25 * 1024 ** 2, grad_scale=1024)
    assert scaled.report()["grad_sq"] == pytest.approx(plain.report()["grad_sq"])
    assert scaled.report()["trace_sigma"] == pytest.approx(plain.report()["trace_sigma"])
    est = NoiseScaleEstimator(2, 8, groups=["conv", "fc"])
    est.update([8.0, 3.0], [4.25, 1.5])           # groups: (|G|^2, tr) = (3, 10) and (1, 4)
    rep = est.report()
    assert rep["grad_sq"] == pytest.approx(4.0) and rep["trace_sigma"] == pytest.approx(14.0)
    assert rep["groups"]["conv"]["b_simple"] == pytest.approx(10 / 3)
    assert rep["groups"]["fc"]["b_simple"] == pytest.approx(4.0)
    with pytest.raises(ValueError):
        est.update(8.0, 4.25)                     # one value for two groups


def test_for_config_and_bad_arguments():
    e = NoiseScaleEstimator.for_config(local_batch=32, size=4, backward_passes_per_step=2)
    assert (e.b_small, e.b_big, e.mode, e.global_batch) == (64, 256, "workers", 256)
    e = NoiseScaleEstimator.for_config(local_batch=32, size=1, backward_passes_per_step=3)
    assert (e.b_small, e.b_big, e.mode, e.global_batch) == (32, 96, "micro_batches", 96)
    e = NoiseScaleEstimator.for_config(local_batch=32, size=1)
    assert e.update(1.0, 1.0) is None
    rep = e.report()
    assert rep["available"] is False and rep["b_simple"] is None and "cannot estimate" in rep["reason"]
    for args in [(0, 8), (8, 4), (2.5, 8)]:
        with pytest.raises(ValueError):
            NoiseScaleEstimator(*args)
    with pytest.raises(ValueError):
        NoiseScaleEstimator(2, 8, ema_beta=1.0)
    with pytest.raises(ValueError):
        NoiseScaleEstimator.for_config(0, 2)


def test_state_dict_round_trip():
    a = NoiseScaleEstimator(2, 8, ema_beta=0.9)
    for s_, b_ in [(8.0, 4.25), (3.0, 1.5), (5.0, 2.0)]:
        a.update(s_, b_, lr=0.1)
    b = NoiseScaleEstimator(2, 8, ema_beta=0.9)
    b.load_state_dict(a.state_dict())
    assert b.report() == a.report()
    with pytest.raises(ValueError):
        NoiseScaleEstimator(4, 8).load_state_dict(a.state_dict())


# ---- advisor and AdaScale formulas --------------------------------------------------------------------

def test_advisor_formulas():
    adv = Advisor(local_batch=64, workers=4)
    out = adv.advise(256.0)                      # B = 256 = B_crit
    assert out["steps_vs_min"] == pytest.approx(2.0) and out["examples_vs_min"] == pytest.approx(2.0)
    assert out["steps_if_doubled"] == pytest.approx(0.75) and out["examples_if_doubled"] == pytest.approx(1.5)
    assert out["regime"] == "diminishing returns"
    assert (regime(10, 100), regime(1000, 100)) == ("perfect scaling", "plateau")
    # K* = B_crit (1 - f)/(f b) = 256 * 0.9 / 6.4 = 36; doubling: 256 * 0.4 / 6.4 = 16.
    assert (out["workers_limit"], out["workers_limit_doubling"]) == (36, 16)

    def savings_of_infinitely_many(k):           # 1 - S(inf)/S(k)
        return 1 - 1 / (1 + 256 / (k * 64))
    assert savings_of_infinitely_many(36) <= 0.1 + 1e-12 < savings_of_infinitely_many(35)
    assert 1 - steps_ratio(16 * 64, 32 * 64, 256) <= 0.1 + 1e-12 < 1 - steps_ratio(15 * 64, 30 * 64, 256)
    assert workers_limit(5, 64) == 1 and workers_limit(10, 64) == 2
    assert efficiency(256, 512, 256) == pytest.approx(512 / 768)
    assert "goodput_optimal_batch" not in out    # no step times yet


def test_advisor_goodput_and_hysteresis():
    # 0.1 s steps with 0.02 s waiting on communication, one local batch size seen -> t0 = 0,
    # t1 = 0.08/64 s per example. With n = examples per worker per step, B_crit = 256, K = 4:
    # goodput ~ 4n/(0.00125 n + 0.02) * 512/(256 + 4n) ~ n/((n + 16)(n + 64)), maximal at n = 32.
    adv = Advisor(local_batch=64, workers=4, hysteresis=0.05, patience=3, compute_overhead_s=0.0)
    for _ in range(5):
        adv.observe_step(0.1, 0.02)
    first = adv.advise(256.0, step=10)
    assert first["goodput_optimal_batch"] == 128
    assert first["goodput_gain"] == pytest.approx((32 / (48 * 96)) / (64 / (80 * 128)))   # 10/9
    assert first["throughput"] == pytest.approx(2560.0) and first["recommended_batch"] == 256
    assert adv.advise(256.0, step=10)["recommended_batch"] == 256      # same step: no new evidence
    assert adv.advise(256.0, step=11)["recommended_batch"] == 256
    assert adv.advise(256.0, step=12)["recommended_batch"] == 128      # third consecutive evaluation
    # B_crit = 1024 moves the optimum to n = sqrt(16 * 1024 / 4) = 64, the current batch: reset.
    again = adv.advise(1024.0, step=13)
    assert again["goodput_optimal_batch"] == 256 and again["recommended_batch"] == 256
    with pytest.raises(ValueError):
        adv.observe_step(0.1, 0.2)
    # One local batch seen and no t0: only the accumulation varies (n = 64, 128, 256, 512): current wins.
    acc_only = Advisor(local_batch=64, workers=4)
    acc_only.observe_step(0.1, 0.02)
    out = acc_only.advise(256.0, step=1)
    assert (out["goodput_optimal_batch"], out["goodput_gain"], out["search_local_batch"]) == (256, 1.0, False)
    # A second local batch size observed: t0, t1 fitted (32 -> 0.05 s, 64 -> 0.08 s: t0 = 0.02, t1 = 1/1067).
    acc_only.observe_step(0.07, 0.02, local_batch=32)
    t0, t1, ts = acc_only.time_model()
    assert (t0, t1, ts) == (pytest.approx(0.02), pytest.approx(0.03 / 32), pytest.approx(0.02))


def test_adascale_gain_and_progress():
    assert adascale_gain(3.0, 1.0, 4) == pytest.approx(16 / 7)      # (3 + 1)/(3/4 + 1)
    assert gain_from_noise_scale(96, 32, 4) == pytest.approx(16 / 7)
    assert adascale_gain(0.0, 1.0, 8) == 1.0 and adascale_gain(5.0, 0.0, 8) == 8.0
    assert adascale_gain(1e9, 1e-9, 8) == pytest.approx(8.0, rel=1e-6)
    ada = AdaScale(lambda tau: 0.1 if tau < 3 else 0.01, scale=4, base_batch=32)
    assert ada.update(grad_sq=1.0, trace_sigma=96.0) == pytest.approx(0.1 * 16 / 7)
    assert ada.update(1.0, 96.0) == pytest.approx(0.1 * 16 / 7)      # tau = 16/7 < 3
    assert ada.update(1.0, 96.0) == pytest.approx(0.01 * 16 / 7)     # tau = 32/7 >= 3
    assert ada.progress == pytest.approx(48 / 7) and ada.done(6) and not ada.done(7)

    class Opt:
        param_groups = [{"lr": 0.2}, {"lr": 0.1}]
    ada.apply(Opt)
    assert [g["lr"] for g in Opt.param_groups] == pytest.approx([ada.lr, ada.lr / 2])
    with pytest.raises(ValueError):
        adascale_gain(1.0, 1.0, 0.5)


def test_adascale_policy_reads_the_estimator_once_per_step():
    est = NoiseScaleEstimator(32, 128)           # s = 4, B0 = 32
    pol = AdaScalePolicy(est, verbose=False)
    assert pol.multiplier(0) == 4.0              # nothing measured yet: noise dominates, the linear rule
    # |G|^2 = 1, tr = 96 (sigma^2 = tr/B0 = 3): A_s = 1 + 96/32 = 4, A_b = 1 + 96/128 = 1.75.
    est.update(4.0, 1.75)
    assert pol.multiplier(1) == pytest.approx(16 / 7) and pol.multiplier(1) == pytest.approx(16 / 7)
    assert pol.progress == pytest.approx(4 + 16 / 7)
    assert est.report()["adascale_progress"] == pytest.approx(4 + 16 / 7)
    assert est.report()["adascale_gain"] == pytest.approx(16 / 7)


# ---- (b) tracking on a real run ----------------------------------------------------------------------

@needs_data
@budget(60)
def test_ratio_of_emas_tracks_exact_values_on_a_real_run():
    from pyhorovod.scaling.fmnist import features, load_fashion_mnist
    x, y = load_fashion_mnist("train")
    x = features(x[:6000], pool=4).astype(np.float64)
    x = np.hstack([(x - x.mean(0)) / (x.std(0) + 1e-3), np.ones((len(x), 1))])
    onehot = np.eye(10)[y[:6000]]
    rng = np.random.default_rng(0)
    workers, b, beta, lr = 16, 128, 0.99, 0.5
    live = NoiseScaleEstimator(b, workers * b, ema_beta=beta)
    exact_g, exact_tr = _BiasCorrectedEMA(beta, 1), _BiasCorrectedEMA(beta, 1)
    w = np.zeros((x.shape[1], 10))
    worst = 0.0
    for step in range(400):
        idx = rng.integers(0, len(x), (workers, b))
        a_s, a_b = worker_norms(w, x, onehot, idx)
        g, tr = exact_stats(w, x, onehot)
        live.update(a_s, a_b, lr)
        exact_g.update([g])
        exact_tr.update([tr])
        exact = float(exact_tr.value()[0] / exact_g.value()[0])
        if step >= 100:
            worst = max(worst, abs(live.b_simple() / exact - 1))
        xi, r = softmax_per_example(w, x[idx.reshape(-1)], onehot[idx.reshape(-1)])
        w -= lr * xi.T @ r / idx.size
    assert worst < 0.20, f"live ratio-of-EMAs strayed {worst:.0%} from the exact one"
    assert 100 < exact < 1e5     # a meaningful scale, not a degenerate one


# ---- the sweep machinery on a trial whose answer is known -----------------------------------------------

SYNTHETIC_B_CRIT, SYNTHETIC_WORK = 100.0, 50.0


def synthetic_trial(batch_size, hparams, max_steps, report, measure=False):
    """A user trial (the --train protocol) that needs exactly WORK (1 + B_crit/B) / eff steps, where eff in
    (0, 1] peaks at the search centre's learning rate: steps-to-result must fit back to B_crit = 100."""
    centre = math.sqrt(batch_size / 128.0)
    eff = math.exp(-math.log(hparams["lr_eff"] / centre) ** 2)
    progress = 0.0
    for step in range(1, max_steps + 1):
        progress += eff * batch_size / (batch_size + SYNTHETIC_B_CRIT)
        metric = 1.0 - progress / SYNTHETIC_WORK
        if not report(step, metric, SYNTHETIC_B_CRIT if measure else None):
            return


def test_sweep_recovers_a_known_critical_batch(tmp_path):
    from pyhorovod.scaling import sweep
    from pyhorovod.scaling.stepfit import fit_steps, halton, steps_to_result
    out = str(tmp_path / "syn")
    res = sweep.main(["--train", "test_noise_scale:synthetic_trial", "--batch-sizes", "8,32,128,512,2048",
                      "--trials", "6", "--targets", "0.5,0.0", "--min-steps", "2000", "--out", out,
                      "--quiet"])
    s = res["series"]["user"]
    for t, work in (("0.5", SYNTHETIC_WORK / 2), ("0.0", SYNTHETIC_WORK)):
        fit = s["fits"][t]
        assert fit["b_crit"] == pytest.approx(SYNTHETIC_B_CRIT, rel=0.05), fit
        for b in res["batch_sizes"]:   # the best trial is within a few % of the ideal step count
            ideal = work * (1 + SYNTHETIC_B_CRIT / b)
            assert ideal <= s["per_batch"][str(b)]["steps"][t] <= 1.05 * ideal + 1
        assert s["measure"]["b_simple_at_target"][t] == SYNTHETIC_B_CRIT
    assert s["measure"]["batch"] == 128                     # the batch size nearest the fitted B_crit
    assert os.path.getsize(out + ".png") > 10000
    # Pieces: Halton points, steps-to-result as the minimum of first hits, an exact fit.
    assert halton(3, 2).tolist() == [[0.5, 1 / 3], [0.25, 2 / 3], [0.75, 1 / 9]]
    assert steps_to_result([[(1, 0.9), (5, 0.4), (9, 0.1)], [(2, 0.45), (3, 0.3)]], 0.5) == 2
    assert steps_to_result([[(1, 0.9)]], 0.5) is None
    exact = fit_steps([10, 100, 1000], [30 * (1 + 50 / b) for b in (10, 100, 1000)])
    assert exact["b_crit"] == pytest.approx(50, rel=1e-6) and exact["s_min"] == pytest.approx(30, rel=1e-6)
    assert fit_steps([10, 100], [5, None]) is None


# ---- (c) the sweep's fitted B_crit against the live B_simple --------------------------------------------

@needs_data
@budget(150)
def test_sweep_fitted_b_crit_matches_live_b_simple_and_grows(tmp_path):
    """A small steps-to-result sweep (MLP on 14x14 Fashion-MNIST, 4 batch sizes x 5 quasi-random trials,
    momentum). Deterministic (fixed seeds, one thread); on this machine it gives B_crit 141/233/392 for
    targets 0.6/0.52/0.47 against a live B_simple of 76/133/266 (30-65 s on the loaded 2-core machine)."""
    import json
    from pyhorovod.scaling import sweep
    out = str(tmp_path / "sweep")
    res = sweep.main(["--optimizers", "momentum", "--hidden", "64", "--pool", "2", "--n-train", "30000",
                      "--n-val", "2000", "--batch-sizes", "32,128,512,2048", "--trials", "5",
                      "--targets", "0.6,0.52,0.47", "--max-epochs", "3", "--min-steps", "150",
                      "--ema-beta", "0.9", "--out", out, "--quiet"])
    s = res["series"]["momentum"]
    crit, live = [], []
    for t in res["targets"]:                       # loosest first
        fit, b_simple = s["fits"][str(t)], s["measure"]["b_simple_at_target"][str(t)]
        assert fit is not None and not fit["at_bound"] and b_simple is not None, (t, fit, b_simple)
        assert b_simple / 3 <= fit["b_crit"] <= 3 * b_simple, (t, fit["b_crit"], b_simple)
        crit.append(fit["b_crit"])
        live.append(b_simple)
    assert crit[0] < crit[1] < crit[2], f"B_crit should grow as the target falls: {crit}"
    assert json.load(open(out + ".json"))["series"]["momentum"]["fits"] == json.loads(json.dumps(s["fits"]))
    assert os.path.getsize(out + ".png") > 10000


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_core_sum_of_squares_matches_numpy(dtype):
    from pyhorovod import _core
    code = {"float32": _core.FLOAT32, "float64": _core.FLOAT64}[dtype]
    for n in [0, 1, 7, 8, 9, 63, 1000, 50_176, 1_000_003]:   # every tail length of the 8-wide loop
        x = np.random.default_rng(n).standard_normal(n).astype(dtype) * 3.0
        want = float(np.sum(x.astype(np.float64) ** 2))
        got = _core.sum_of_squares(x.ctypes.data, x.size, code)
        assert abs(got - want) <= 1e-12 * max(1.0, want), (n, got, want)
    with pytest.raises(_core.InvalidArgumentError, match="int32 is not supported"):
        _core.sum_of_squares(np.zeros(4, np.int32).ctypes.data, 4, _core.INT32)
