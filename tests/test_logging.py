"""pyhorovod's Python logging (pyhorovod/_logging.py): what importing attaches, what HOROVOD_LOG_LEVEL shows,
and that rank 0's LR and advisor lines are records an application silences or routes.

Every body runs in fresh rank processes (tests/mp.py), since the set-up happens at import and init.
"""
import re

import pytest

from mp import run_ranks

NO_LEVEL = {"HOROVOD_LOG_LEVEL": ""}  # empty counts as unset: the parent's value must not leak in
REPORT_ENV = {**NO_LEVEL, "PYHOROVOD_NOISE_SCALE_LOG_EVERY": "1"}
# The three report lines of rank 0, as the stderr handler writes them (the core's format).
REPORT_LINES = (r"^\[pyhorovod rank 0 INFO\] lr_scaling=linear \(x2\): step 0 applies lr 0\.025 \(warmup 0/2\)$",
                r"^\[pyhorovod rank 0 INFO\] lr_scaling=adascale: step 0 gain 2 of 2, progress 2\.0 base steps",
                r"^\[pyhorovod rank 0 INFO\] \[noise-scale\] step 1: ")
REPORT_LOGGERS = {"pyhorovod.torch.lr", "pyhorovod.scaling.adascale", "pyhorovod.scaling.noise_scale"}


def body_import():
    import logging
    import pyhorovod.torch  # noqa: F401  (imports pyhorovod too)
    loggers = {"root": logging.getLogger()}
    loggers.update((name, logging.getLogger(name)) for name in list(logging.root.manager.loggerDict)
                   if name.startswith("pyhorovod") and isinstance(logging.getLogger(name), logging.Logger))
    return {"handlers": {name: [type(h).__name__ for h in lg.handlers] for name, lg in loggers.items()
                         if lg.handlers},
            "pyhorovod level": logging.getLogger("pyhorovod").level}


def test_import_adds_only_a_null_handler():
    value = run_ranks(body_import, 1, timeout=60, env=NO_LEVEL, launcher=None)[0].value
    assert value == {"handlers": {"pyhorovod": ["NullHandler"]}, "pyhorovod level": 0}


def body_init(user_format):
    import logging
    import numpy as np
    import pyhorovod as hvd
    if user_format:   # configured after the import: pyhorovod's own handler must stand down
        logging.basicConfig(format=user_format)
    hvd.init()
    total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum)
    hvd.shutdown()
    return float(total[0])


def test_log_level_debug_shows_python_and_core_lines():
    results = run_ranks(body_init, 2, timeout=90, args=("",), env={"HOROVOD_LOG_LEVEL": "debug"})
    for r, res in enumerate(results):
        assert res.value == 3.0
        lines = res.stderr.splitlines()
        # Python, before init knows the rank and after; the core in the same format under the same level.
        assert f"[pyhorovod DEBUG] pyhorovod: rank {r} of 2 from pyhorovod variables" in lines, res.stderr
        assert any(line.startswith(f"[pyhorovod rank {r} DEBUG] pyhorovod: initialized rank {r}/2 ")
                   for line in lines), res.stderr
        assert any(line.startswith(f"[pyhorovod rank {r} INFO] engine stats: ") for line in lines), res.stderr


def test_user_configuration_after_import_gets_each_line_once():
    results = run_ranks(body_init, 2, timeout=90, args=("USER %(name)s %(levelname)s %(message)s",),
                        env={"HOROVOD_LOG_LEVEL": "debug"})
    for r, res in enumerate(results):
        ours = [line for line in res.stderr.splitlines() if "initialized rank" in line]
        assert len(ours) == 1 and ours[0].startswith(f"USER pyhorovod DEBUG pyhorovod: initialized rank {r}/2"), \
            res.stderr


def test_warnings_still_reach_a_script_without_logging():
    # The NullHandler alone would hide them; init() attaches the handler that shows WARNING and above.
    results = run_ranks(body_init, 2, timeout=90, args=("",),
                        env={**NO_LEVEL, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "1"})
    assert re.search(r"^\[pyhorovod rank 0 WARNING\] pyhorovod: these Horovod variables have no effect "
                     r"here: HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", results[0].stderr, re.M), results[0].stderr
    assert "no effect" not in results[1].stderr
    assert "DEBUG" not in results[0].stderr and "INFO" not in results[0].stderr


def body_reports(mode):
    """Two optimizers on 2 ranks: lr_scaling="linear" with a 2-step warmup, and measure_noise_scale with
    lr_scaling="adascale"; two steps each. mode: "default" (no logging set up), "silenced" (level WARNING
    on "pyhorovod"), "handler" (the application's own handler on "pyhorovod", level INFO)."""
    import logging
    import torch
    import pyhorovod.torch as hvd
    seen = []
    if mode == "silenced":
        logging.getLogger("pyhorovod").setLevel(logging.WARNING)
    elif mode == "handler":
        class Keep(logging.Handler):
            def emit(self, record):
                seen.append([record.name, record.levelname, record.getMessage()])
        logging.getLogger("pyhorovod").addHandler(Keep())
        logging.getLogger("pyhorovod").setLevel(logging.INFO)
    hvd.init()
    for kwargs in ({"lr_scaling": "linear", "warmup_steps": 2},
                   {"lr_scaling": "adascale", "measure_noise_scale": True, "batch_size": 2}):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.025),
                                       named_parameters=model.named_parameters(), **kwargs)
        for step in range(2):
            opt.zero_grad()
            model(torch.full((2, 3), float(hvd.rank() + step + 1))).pow(2).sum().backward()
            opt.step()
    hvd.shutdown()
    return seen


def _report_lines(text):
    return [p for p in REPORT_LINES if re.search(p, text, re.M)]


def test_report_lines_show_on_rank_0_without_logging_set_up():
    results = run_ranks(body_reports, 2, timeout=120, args=("default",), env=REPORT_ENV)
    assert _report_lines(results[0].stderr) == list(REPORT_LINES), results[0].stderr
    assert "[noise-scale]" not in results[0].stdout and "lr_scaling" not in results[0].stdout
    assert "lr_scaling" not in results[1].stderr and "noise-scale" not in results[1].stderr, results[1].stderr


@pytest.mark.parametrize("how", ["setLevel", "HOROVOD_LOG_LEVEL"])
def test_level_warning_on_pyhorovod_silences_report_lines(how):
    if how == "setLevel":
        results = run_ranks(body_reports, 2, timeout=120, args=("silenced",), env=REPORT_ENV)
    else:
        results = run_ranks(body_reports, 2, timeout=120, args=("default",),
                            env={**REPORT_ENV, "HOROVOD_LOG_LEVEL": "warning"})
    for res in results:
        text = res.stdout + res.stderr
        assert "lr_scaling" not in text and "noise-scale" not in text, text


def test_application_handler_receives_report_records():
    results = run_ranks(body_reports, 2, timeout=120, args=("handler",), env=REPORT_ENV)
    records = results[0].value
    assert {name for name, level, _ in records if level == "INFO"} >= REPORT_LOGGERS, records
    assert [m for n, _, m in records if n == "pyhorovod.torch.lr"][0] == \
        "lr_scaling=linear (x2): step 0 applies lr 0.025 (warmup 0/2)"
    # Routed to the application's handler only: pyhorovod's stderr handler stands down.
    assert _report_lines(results[0].stderr) == [], results[0].stderr
    assert not [r for r in results[1].value if r[0] in REPORT_LOGGERS], results[1].value


@pytest.mark.parametrize("value", ["debug", "DEBUG"])
def test_log_level_sets_python_level(value):
    import logging
    from pyhorovod import _logging
    logger = logging.getLogger(_logging.ROOT)
    before, handlers = logger.level, list(logger.handlers)
    try:
        logger.setLevel(logging.NOTSET)
        _logging.set_up({"HOROVOD_LOG_LEVEL": value})
        assert logger.level == logging.DEBUG
        logger.setLevel(logging.ERROR)   # a level the application set wins over the variable
        _logging.set_up({"HOROVOD_LOG_LEVEL": "trace"})
        assert logger.level == logging.ERROR
    finally:
        logger.setLevel(before)
        logger.handlers[:] = handlers
