"""LR scaling rules and gradual warmup: exact values (pyhorovod/scaling/lr.py)."""
import math

import pytest

from pyhorovod.scaling.lr import LinearWarmup, scale_factor, scaled_lr, warmup_multiplier, warmup_steps_from


class _Opt:
    """Just enough of a torch optimizer: param_groups with an "lr" key."""
    def __init__(self, *lrs):
        self.param_groups = [{"lr": lr} for lr in lrs]


def test_scaled_lr_rules():
    assert scaled_lr(0.1, "linear", base_batch=256, global_batch=1024) == pytest.approx(0.4, abs=1e-15)
    assert scaled_lr(0.1, "sqrt", base_batch=256, global_batch=1024) == pytest.approx(0.2, abs=1e-15)
    assert scaled_lr(0.1, "none", base_batch=256, global_batch=1024) == 0.1
    assert scaled_lr(0.1, None) == 0.1
    assert scaled_lr(0.05, "linear", base_batch=32, global_batch=32) == 0.05
    # Goyal et al.: 0.1 per 256 -> batch 8192 uses 3.2
    assert scaled_lr(0.1, "linear", base_batch=256, global_batch=8192) == pytest.approx(3.2, abs=1e-12)
    assert scale_factor("sqrt", 2, 18) == pytest.approx(3.0, abs=1e-15)
    assert scale_factor("linear", 64, 16) == 0.25


@pytest.mark.parametrize("kwargs, msg", [
    (dict(rule="cubic", base_batch=1, global_batch=2), "unknown LR scaling rule 'cubic'"),
    (dict(rule="linear", global_batch=2), "needs base_batch"),
    (dict(rule="sqrt", base_batch=2), "needs global_batch"),
    (dict(rule="linear", base_batch=0, global_batch=2), "base_batch must be a positive number"),
    (dict(rule="linear", base_batch=4, global_batch=-8), "global_batch must be a positive number"),
])
def test_scaled_lr_bad_arguments(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        scaled_lr(0.1, **kwargs)


def test_scaled_lr_bad_base_lr():
    with pytest.raises(ValueError, match="base_lr must be a non-negative number"):
        scaled_lr(-1.0, "none")


def test_warmup_multiplier_values():
    # factor 4 over 8 steps: 1 + 3 * t / 8
    assert [warmup_multiplier(t, 4.0, 8) for t in range(10)] == \
        [1.0, 1.375, 1.75, 2.125, 2.5, 2.875, 3.25, 3.625, 4.0, 4.0]
    assert warmup_multiplier(0, 4.0, 0) == 4.0        # no warmup: scaled from the start
    assert warmup_multiplier(3, 0.5, 4) == 0.625      # a shrinking batch warms "down" the same way
    with pytest.raises(ValueError, match="step must be >= 0"):
        warmup_multiplier(-1, 2.0, 4)


def test_warmup_steps_from():
    assert warmup_steps_from() == 0
    assert warmup_steps_from(warmup_steps=7) == 7
    assert warmup_steps_from(warmup_epochs=5, steps_per_epoch=100) == 500
    assert warmup_steps_from(warmup_epochs=0.5, steps_per_epoch=11) == 6   # round(5.5) -> 6 (banker's: 6)
    with pytest.raises(ValueError, match="not both"):
        warmup_steps_from(warmup_steps=1, warmup_epochs=1, steps_per_epoch=1)
    with pytest.raises(ValueError, match="needs steps_per_epoch"):
        warmup_steps_from(warmup_epochs=1)
    with pytest.raises(ValueError, match="non-negative integer"):
        warmup_steps_from(warmup_steps=2.5)


def test_linear_warmup_scheduler_sets_group_lrs():
    opt = _Opt(0.1, 0.01)
    sched = LinearWarmup(opt, factor=4.0, warmup_epochs=2, steps_per_epoch=2)   # 4 warmup steps
    seen = []
    for _ in range(6):
        seen.append([g["lr"] for g in opt.param_groups])
        sched.step()
    expected_m = [1.0, 1.75, 2.5, 3.25, 4.0, 4.0]
    for lrs, m in zip(seen, expected_m):
        assert lrs[0] == pytest.approx(0.1 * m, rel=1e-15)
        assert lrs[1] == pytest.approx(0.01 * m, rel=1e-15)
    assert sched.get_last_lr() == [pytest.approx(0.4), pytest.approx(0.04)]
    # resume: a fresh scheduler loaded from the state continues at the same step
    state = sched.state_dict()
    opt2 = _Opt(123.0, 456.0)
    sched2 = LinearWarmup(opt2, factor=2.0)
    sched2.load_state_dict(state)
    assert [g["lr"] for g in opt2.param_groups] == [pytest.approx(0.4), pytest.approx(0.04)]
    assert sched2.lr_at(2) == [pytest.approx(0.25), pytest.approx(0.025)]


def test_linear_warmup_bad_factor():
    with pytest.raises(ValueError, match="factor must be a positive number"):
        LinearWarmup(_Opt(0.1), factor=0)
    assert math.isclose(LinearWarmup(_Opt(0.1), factor=3).get_last_lr()[0], 0.3)
