"""Goodput autoscaling: the throughput model, the decision logic on synthetic throughput and noise-scale
curves, the LR across resizes, the trace, rank 0's controller and the launcher's flags.

Goodput of n workers of b examples relative to the current count n0 (scaling/autoscale.py):
throughput(n) x (B_noise + n0 b)/(B_noise + n b).
"""
import argparse
import csv
import os

import pytest

from pyhorovod.elastic import autoscaler as A
from pyhorovod.runner import autoscale_option
from pyhorovod.scaling.autoscale import GoodputAutoscaler
from pyhorovod.scaling.autoscale_trace import AutoscaleTrace
from pyhorovod.scaling.cost_model import Network, ring_allreduce_time
from pyhorovod.scaling.lr import ResizeWarmup
from pyhorovod.scaling.noise_scale import NoiseScaleEstimator, horizon_beta
from pyhorovod.scaling.throughput import Host, ThroughputModel, oversubscription, placement

B = 64   # local batch of every test job


FREE = Network(0.0, 1e15)   # communication that costs nothing: only compute and oversubscription count


def model(slots=8, cores=8, hosts=None, grad_bytes=0.0, network=FREE):
    return ThroughputModel(hosts or [Host("h0", slots, cores)], B, grad_bytes, network)


def run(decider, n, b_noise, times):
    """`times` evaluations at n workers; the list of target_np answers."""
    return [decider.evaluate(n, b_noise, step=i).target_np for i in range(times)]


# ---- throughput model ------------------------------------------------------------------------------------

def test_placement_and_oversubscription():
    hosts = [Host("a", 3, 2), Host("b", 2, 2)]
    assert placement(4, hosts) == [3, 1] and placement(5, hosts) == [3, 2] and placement(6, hosts) is None
    assert oversubscription(2, hosts) == 1.0          # 2 ranks on 2 cores
    assert oversubscription(3, hosts) == 1.5          # 3 ranks share host a's 2 cores
    assert oversubscription(6, hosts) is None
    with pytest.raises(ValueError):
        Host("c", 1, 0)


def test_model_measured_counts_win_and_the_rest_is_corrected():
    m = model(grad_bytes=0.0)
    assert m.throughput(2) is None                     # nothing measured: no throughput to offer
    m.observe(1, 0.10)
    # t_c = 0.1 s, no communication bytes: T(n) = 0.1 everywhere, throughput n b / 0.1.
    assert m.throughput(1) == pytest.approx(640) and m.throughput(4) == pytest.approx(2560)
    m.observe(4, 0.16, 0.06)                           # measured at 4: 1.6x the model
    assert m.throughput(4) == pytest.approx(4 * 64 / 0.16)
    # compute normalised per core: (0.1 + 0.1)/2 = 0.1; correction = median(1.0, 1.6) = 1.3
    assert m.correction() == pytest.approx(1.3)
    assert m.step_s(2) == pytest.approx(0.13) and m.throughput(9) is None
    with pytest.raises(ValueError, match="more than the hosts' 8 slots"):
        m.observe(9, 0.1)
    with pytest.raises(ValueError):
        m.observe(2, 0.1, 0.2)


def test_model_fits_alpha_beta_to_the_jobs_own_allreduce_times():
    net, mbytes = Network(2e-4, 5e8), 4e6
    m = model(grad_bytes=mbytes, network=Network(1e-6, 1e12))   # a wrong first guess
    for n in (2, 4):
        comm = ring_allreduce_time(mbytes, n, net)
        m.observe(n, 0.05 + comm, comm)
    fitted = m.fitted_network()
    assert fitted.alpha_s == pytest.approx(2e-4, rel=1e-6) and fitted.beta_bytes_per_s == pytest.approx(5e8, rel=1e-6)
    # the model now predicts the unmeasured count 3 exactly (correction 1 at the measured counts)
    assert m.step_s(3) == pytest.approx(0.05 + ring_allreduce_time(mbytes, 3, net), rel=1e-6)


def test_oversubscription_shows_in_the_model():
    m = model(slots=4, cores=2)
    m.observe(1, 0.1)
    assert [round(m.step_s(n), 6) for n in (1, 2, 3, 4)] == [0.1, 0.1, 0.15, 0.2]
    assert m.throughput(4) == pytest.approx(m.throughput(2))     # 4 ranks on 2 cores: no more examples/s


# ---- decision logic ----------------------------------------------------------------------------------------

def test_grows_when_b_noise_dwarfs_the_batch_and_throughput_scales():
    m = model()
    m.observe(1, 0.1)
    d = GoodputAutoscaler(m, 1, 4)
    first = d.evaluate(1, 1e5, step=0)
    assert first.target_np is None and first.best_np == 4 and "1 of 2" in first.reason
    # efficiency (1e5 + 64)/(1e5 + 256) at 4x the throughput
    assert first.goodput[4] == pytest.approx(4 * (1e5 + 64) / (1e5 + 256))
    second = d.evaluate(1, 1e5, step=1)
    assert second.target_np == 4 and "grow to 4" in second.reason


def test_holds_when_throughput_stops_scaling():
    m = model(slots=4, cores=1)                      # every rank shares one core
    m.observe(1, 0.1)
    d = GoodputAutoscaler(m, 1, 4)
    assert run(d, 1, 1e5, 5) == [None] * 5
    last = d.evaluate(1, 1e5, step=5)
    assert last.best_np == 1 and last.goodput[4] < 1.0
    # measured at 2 as well, throughput flat: still no reason to move from 2 either way beyond the margin
    m.observe(2, 0.2)
    assert run(d, 2, 1e5, 4) == [None] * 4


def test_shrinks_when_b_noise_falls_below_the_smaller_counts_batch():
    m = model()
    m.observe(1, 0.10)
    m.observe(4, 0.16, 0.06)
    d = GoodputAutoscaler(m, 1, 4)
    # B_noise = 32: goodput(1) = 640 x 288/96 = 1920 against goodput(4) = 1600; T(2), T(3) = 0.13 (corrected
    # model) give 985 x 288/160 = 1772 and 1477 x 288/224 = 1899.
    first = d.evaluate(4, 32.0, step=0)
    assert first.goodput[1] == pytest.approx(1920 / 1600) and first.goodput[2] == pytest.approx(
        (128 / 0.13) * 288 / 160 / 1600)
    assert first.best_np == 1 and first.target_np is None
    assert d.evaluate(4, 32.0, step=1).target_np == 1
    # with a large B_noise the same measurements say grow/stay at 4
    assert run(GoodputAutoscaler(m, 1, 4), 4, 1e5, 3) == [None] * 3


def test_hysteresis_prevents_flapping():
    m = model()
    m.observe(1, 0.1)
    m.observe(2, 0.1)
    d = GoodputAutoscaler(m, 1, 2, margin=0.10)
    # B_noise = 640: goodput(2)/goodput(1) = 2 x 704/768 = 1.83 -> grow; B_noise = 8: 2 x 72/136 = 1.06 < 1.1.
    # Alternating readings never confirm twice in a row: no request, whatever the order.
    answers = [d.evaluate(1, bn, step=i).target_np for i, bn in enumerate([640, 8, 640, 8, 640, 8])]
    assert answers == [None] * 6
    # a gain inside the margin never triggers, however often it is seen
    assert run(d, 1, 8.0, 6) == [None] * 6
    # a resize starts the confirmations over, and the new count holds for `dwell` = 3 evaluations
    assert d.evaluate(1, 640, step=10).target_np is None
    assert d.evaluate(2, 640, step=11).target_np is None       # now at 2: the best, nothing to do
    back = [d.evaluate(1, 640, step=12 + i) for i in range(5)]  # back at 1 (2 was left): hold 3, confirm 2
    assert [b.target_np for b in back] == [None, None, None, None, 2] and "holding" in back[0].reason


def test_going_back_to_the_count_just_left_needs_twice_the_margin():
    m = model()
    m.observe(1, 0.1)
    m.observe(2, 0.2)                 # no more examples/s at 2
    # at 2 workers, B_noise = 400: goodput(1)/goodput(2) = (400 + 128)/(400 + 64) = 1.138, above the 10%
    # margin but below twice it
    fresh = GoodputAutoscaler(m, 1, 2)
    assert run(fresh, 2, 400.0, 2) == [None, 1]                # a job that started at 2 shrinks
    d = GoodputAutoscaler(m, 1, 2)
    assert d.evaluate(1, 400.0).target_np is None              # it ran at 1, then grew to 2
    answers = [d.evaluate(2, 400.0, step=i) for i in range(1, 9)]
    assert [a.target_np for a in answers] == [None] * 8 and "within the 20% margin" in answers[-1].reason
    assert answers[-1].goodput[1] == pytest.approx(528 / 464)


def test_counts_the_hosts_cannot_give_are_never_chosen():
    m = model(hosts=[Host("a", 2, 2), Host("b", 1, 1)])   # 3 slots
    m.observe(1, 0.1)
    d = GoodputAutoscaler(m, 1, 6)
    assert d.candidates() == [1, 2, 3]
    out = [d.evaluate(1, 1e6, step=i) for i in range(2)]
    assert out[1].target_np == 3 and set(out[1].goodput) == {1, 2, 3}


def test_no_estimate_holds_and_bad_bounds():
    m = model()
    m.observe(1, 0.1)
    d = GoodputAutoscaler(m, 1, 4)
    assert d.evaluate(1, None).target_np is None and "no noise-scale" in d.evaluate(1, -3.0).reason
    for lo, hi in ((0, 2), (3, 2)):
        with pytest.raises(ValueError, match="min_np"):
            GoodputAutoscaler(m, lo, hi)


# ---- LR across resizes, trace, estimator horizon ---------------------------------------------------------------

def test_resize_warmup_ramps_after_a_grow_and_drops_at_once_after_a_shrink():
    lines = []
    w = ResizeWarmup(warmup_steps=4, log_fn=lines.append)
    assert [w.multiplier(s, 2.0) for s in range(3)] == [2.0, 2.0, 2.0]   # 2 workers, linear rule
    w.resize(3, 128, 256)                                                # grow to 4 workers: target 4
    assert [w.multiplier(s, 4.0) for s in range(3, 9)] == [2.0, 2.5, 3.0, 3.5, 4.0, 4.0]
    w.resize(9, 256, 64)                                                 # shrink to 1 worker: target 1
    assert w.multiplier(9, 1.0) == 1.0
    assert "warms up from 2 over 4 steps" in lines[0] and "warmup after the resize done" in lines[1]
    assert "applies at once" in lines[2] and len(w.resizes) == 2
    # AdaScale: the target (gain) changes every step; the ramp follows it
    a = ResizeWarmup(warmup_steps=2)
    a.multiplier(0, 1.5)
    a.resize(1, 64, 128)
    assert a.multiplier(1, 1.9) == 1.5 and a.multiplier(2, 1.7) == pytest.approx(1.6) and a.multiplier(3, 1.8) == 1.8


def test_trace_csv_png_and_worker_seconds(tmp_path):
    t = AutoscaleTrace(str(tmp_path / "run"))
    base = dict(global_batch=64, b_simple=100.0, measured_goodput=500.0, predicted_goodput=480.0,
                best_predicted_goodput=900.0, best_np=2, target_np=None, remaining_s=None, resize_pause_s=10.0,
                reason="x")
    t.record(step=50, time_s=10.0, workers=1, **base)
    t.record(step=100, time_s=20.0, workers=1, **dict(base, target_np=2))
    t.record(step=150, time_s=26.0, workers=2, **dict(base, global_batch=128))
    assert t.finish(30.0, 2, "test accuracy 0.8") == pytest.approx(1 * 10 + 1 * 10 + 1 * 6 + 2 * 4)
    lines = open(t.csv_path).read().splitlines()
    assert lines[-1] == "# worker-seconds to test accuracy 0.8: 34.0 over 30.0 s"
    rows = list(csv.DictReader(lines[:-1]))
    assert [r["workers"] for r in rows] == ["1", "1", "2"] and rows[1]["target_np"] == "2"
    assert os.path.getsize(t.png_path) > 10000
    with pytest.raises(ValueError, match="lacks"):
        t.record(step=1)


def test_horizon_in_examples_and_continue_from():
    assert horizon_beta(25600, 256) == pytest.approx(0.99) and horizon_beta(25600, 128) == pytest.approx(0.995)
    with pytest.raises(ValueError):
        horizon_beta(100, 128)
    old = NoiseScaleEstimator(64, 128)
    old.update(8.0, 5.0)                       # |G|^2 = 2, tr = 384
    new = NoiseScaleEstimator(64, 256)
    new.continue_from(old.state_dict())
    assert new.b_simple() == pytest.approx(192.0) and (new.b_small, new.b_big) == (64, 256)


# ---- rank 0's controller and the launcher's flags -----------------------------------------------------------------

class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_controller_asks_the_driver_after_two_confirmed_evaluations(tmp_path):
    est = NoiseScaleEstimator.for_config(64, 1, backward_passes_per_step=2)   # one worker, 2 micro-batches
    est.update(2.0 + 1e5 / 64, 2.0 + 1e5 / 128)      # |G|^2 = 2, tr = 1e5: B_simple = 5e4
    asked, clock, size = [], _Clock(), [1]
    scaler = A.Autoscaler(estimator=est, every=10, min_np=1, max_np=3, settle=2, grad_bytes=0,
                          hosts=[Host("localhost", 3, 4)], trace=str(tmp_path / "tr"), size_fn=lambda: size[0],
                          rank_fn=lambda: 0, request_fn=asked.append, clock=clock)
    decisions = []
    for _ in range(30):
        clock.t += 0.05
        est.record_step_time(0.05, 0.0)
        decisions.append(scaler.step())
    assert scaler.model.measured_counts() == [1] and scaler.local_batch == 128
    assert [d.target_np for d in decisions if d is not None] == [None, 3, None] and asked == [3]
    assert scaler.finish() == pytest.approx(1.5)      # 30 steps of 0.05 s at one worker
    assert open(str(tmp_path / "tr.csv")).read().count("\n") == 5   # header, 3 rows, final line


def test_controller_refuses_a_job_without_the_noise_scale():
    class Plain:
        param_groups = []
    with pytest.raises(ValueError, match=r"measure_noise_scale=True, batch_size="):
        A.Autoscaler(Plain(), env={})
    est = NoiseScaleEstimator(64, 128)
    with pytest.raises(ValueError, match="PYHOROVOD_AUTOSCALE_MIN_NP"):
        A.Autoscaler(estimator=est, env={}, rank_fn=lambda: 0, size_fn=lambda: 1, request_fn=print)
    with pytest.raises(ValueError, match="name:slots:cores"):
        A.parse_hosts("a:1")


def _cli(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--min-np", dest="min_np", type=int)
    p.add_argument("--max-np", dest="max_np", type=int)
    autoscale_option.add_flags(p)
    return p.parse_args(argv)


def test_launcher_flags():
    with pytest.raises(ValueError, match="needs --min-np and --max-np"):
        autoscale_option.check(_cli(["--autoscale", "goodput", "--max-np", "3"]))
    with pytest.raises(SystemExit):
        _cli(["--autoscale", "pollux"])
    assert autoscale_option.worker_env(_cli(["--min-np", "1", "--max-np", "3"])) == {}
    env = autoscale_option.worker_env(_cli(["--autoscale", "goodput", "--min-np", "1", "--max-np", "3",
                                            "--autoscale-cores-per-host", "2", "--autoscale-every", "20"]),
                                      {"h1": 2, "h2": 1})
    assert env[A.ENV_HOSTS] == "h1:2:2,h2:1:2" and env[A.ENV_EVERY] == "20" and env[A.ENV_MAX] == "3"
    assert A.parse_hosts(env[A.ENV_HOSTS]) == [Host("h1", 2, 2), Host("h2", 1, 2)]
    assert env["PYHOROVOD_NOISE_SCALE_HORIZON"] == str(autoscale_option.DEFAULT_HORIZON_EXAMPLES)


def test_request_size_sets_the_drivers_key():
    from pyhorovod import _core
    from pyhorovod.elastic import _membership as proto
    server = _core.TcpStoreServer("127.0.0.1", 0, b"s3cret")
    try:
        with pytest.raises(ValueError, match="only in a worker of an elastic job"):
            proto.request_size(2)
        proto._client("127.0.0.1", server.port, b"s3cret", 5.0)
        proto.request_size(3)
        assert bytes(proto._session.store.get(proto.TARGET_KEY, 5.0)) == b"3"
        with pytest.raises(ValueError):
            proto.request_size(0)
    finally:
        proto._session.store, proto._session.store_addr = None, None
        server.close()


def test_what_if_other_hosts_keeps_compute_link_and_correction():
    m = model(slots=3, cores=2)
    m.observe(1, 0.10)
    m.observe(1, 0.10)
    m.observe(3, 0.30)            # compute per core median(0.1, 0.1, 0.3/1.5) = 0.1; model T(3) = 0.15
    assert m.correction() == pytest.approx(1.5)          # median of measured/model: 1 at 1, 2 at 3
    spare = m.what_if([Host("big", 3, 3)])
    assert spare.measured_counts() == [] and spare.correction() == pytest.approx(1.5)
    # a core per rank: T(3) = 0.1 x 1.5 (correction), where these hosts measured 0.30
    assert spare.step_s(3) == pytest.approx(0.15) and m.step_s(3) == pytest.approx(0.30)
