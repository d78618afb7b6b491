"""The resize-cost rule of the goodput autoscaler (scaling/autoscale.py): a confirmed move is made only
when the time it saves over the remaining training, R (1 - 1/g), exceeds the pause of a resize (measured
from the job's own resizes, a default before the first); without a remaining time the rule is skipped.

Numbers: one measured count of 0.1 s per step of 64 examples and free communication, so n workers give n
times the throughput; with B_noise = 192 the efficiency of 2 x 64 against 64 is (192 + 64)/(192 + 128) =
0.8, so 2 workers predict g = 1.6 and save 0.375 R.
"""
import csv

import pytest

from pyhorovod.elastic import autoscaler as A
from pyhorovod.scaling.autoscale import DEFAULT_RESIZE_PAUSE_S, GoodputAutoscaler
from pyhorovod.scaling.noise_scale import NoiseScaleEstimator
from pyhorovod.scaling.throughput import Host
from test_autoscale import _Clock, model

B_NOISE = 192.0


def decider(**kw):
    m = model()
    m.observe(1, 0.1)
    return GoodputAutoscaler(m, 1, 2, **kw)


def targets(d, remaining_s, times=2):
    return [d.evaluate(1, B_NOISE, step=i, remaining_s=remaining_s).target_np for i in range(times)]


def test_without_remaining_time_the_rule_is_skipped():
    d = decider()
    first = d.evaluate(1, B_NOISE)
    assert first.gain == pytest.approx(1.6) and first.remaining_s is None and "saves" not in first.reason
    assert d.evaluate(1, B_NOISE).target_np == 2


def test_a_move_that_saves_less_than_the_default_pause_is_not_made():
    d = decider()
    assert d.pause_estimate() == (DEFAULT_RESIZE_PAUSE_S, "default") and DEFAULT_RESIZE_PAUSE_S == 10.0
    held = [d.evaluate(1, B_NOISE, step=i, remaining_s=16.0) for i in range(3)]   # saves 6 s < 10 s
    assert [h.target_np for h in held] == [None, None, None]
    assert held[0].reason == ("2 workers gain +60.0% but do not pay for the resize; saves 6.0 s of 16.0 s left "
                              "against a resize pause of 10.0 s (default)")
    assert (held[0].remaining_s, held[0].pause_s) == (16.0, 10.0)
    # 32 s left: saves 12 s > 10 s; still two confirmations
    moved = [d.evaluate(1, B_NOISE, step=i, remaining_s=32.0) for i in range(2)]
    assert [m.target_np for m in moved] == [None, 2]
    assert moved[1].reason == ("grow to 2 workers: +60.0% goodput, confirmed 2 times; saves 12.0 s of 32.0 s "
                               "left against a resize pause of 10.0 s (default)")


def test_measured_pauses_replace_the_default():
    d = decider()
    d.observe_pause(30.0)
    d.observe_pause(10.0)
    assert d.pause_estimate() == (20.0, "median of 2 measured")
    assert targets(d, 32.0) == [None, None]        # saves 12 s < 20 s
    assert targets(d, 64.0) == [None, 2]           # saves 24 s > 20 s
    d.observe_pause(12.0)
    assert d.pause_estimate()[0] == 12.0
    with pytest.raises(ValueError, match="pause must be >= 0"):
        d.observe_pause(-1.0)


def test_a_pause_of_its_own_interrupts_the_confirmations():
    """A count that stops paying for its resize starts its confirmations over."""
    d = decider()
    assert d.evaluate(1, B_NOISE, remaining_s=32.0).target_np is None      # 1 of 2
    assert d.evaluate(1, B_NOISE, remaining_s=16.0).target_np is None      # does not pay: count reset
    assert targets(d, 32.0) == [None, 2]


def test_bad_inputs():
    with pytest.raises(ValueError, match="resize_pause_s"):
        decider(resize_pause_s=-1)
    with pytest.raises(ValueError, match="remaining_s"):
        decider().evaluate(1, B_NOISE, remaining_s=-5)


def test_controller_measures_the_pause_and_traces_the_rules_inputs(tmp_path):
    """Rank 0's controller: the pause from the step that asked (step 20, t = 1.0 s) to the first step at
    the new size (4 steps later: t = 1.2 s), and the trace's columns of the rule's inputs."""
    est = NoiseScaleEstimator.for_config(64, 1, backward_passes_per_step=2)
    est.update(2.0 + 1e5 / 64, 2.0 + 1e5 / 128)      # B_simple = 5e4: 3 workers gain ~3x
    asked, clock, size = [], _Clock(), [1]
    scaler = A.Autoscaler(estimator=est, every=10, min_np=1, max_np=3, settle=2, grad_bytes=0,
                          hosts=[Host("localhost", 3, 4)], trace=str(tmp_path / "tr"), size_fn=lambda: size[0],
                          rank_fn=lambda: 0, request_fn=asked.append, clock=clock)
    for i in range(1, 31):
        clock.t = round(0.05 * i, 6)
        if i == 24:
            size[0] = 3                               # the driver's new generation
        est.record_step_time(0.05, 0.0)
        scaler.step(remaining_s=1000.0)
    assert asked == [3] and scaler.decider.pauses == [pytest.approx(0.2)]
    with open(tmp_path / "tr.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["workers"], r["target_np"], r["remaining_s"], r["resize_pause_s"]) for r in rows] == [
        ("10", "1", "", "1000.0", "10.0"), ("20", "1", "3", "1000.0", "10.0"), ("30", "3", "", "1000.0", "0.2")]
    assert "left against a resize pause of 10.0 s (default)" in rows[1]["reason"]
