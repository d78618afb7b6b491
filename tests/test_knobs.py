"""pyhorovod/_knobs.py: the one table of environment variables, and what is derived from it."""
import dataclasses
import os
import subprocess
import sys

import pytest

from pyhorovod import _knobs
from pyhorovod._config import Config, store_limits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme_table() -> str:
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    start = text.index("| variable | default | meaning |")
    return text[start:text.index("\n\n", start) + 1]


def test_readme_table_is_the_generated_one():
    assert _readme_table() == _knobs.markdown_table(), (
        "README.md's table of environment variables differs from pyhorovod/_knobs.py: regenerate it with "
        "`python -m pyhorovod._knobs --markdown`")


def test_generator_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "pyhorovod._knobs", "--markdown"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert out == _knobs.markdown_table()


def test_every_name_is_declared_once():
    names = [n for k in _knobs.KNOBS for n in k.names]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_config_fields_are_the_knobs_with_a_field():
    fields = {f.name: f.default for f in dataclasses.fields(Config)}
    assert fields == {k.field: k.default for k in _knobs.CONFIG_KNOBS}


@pytest.mark.parametrize("knob", [k for k in _knobs.KNOBS if k.alias and k.field], ids=lambda k: k.name)
def test_alias_is_read_and_our_name_wins(knob):
    value = {"str": "x", "float": "7"}[knob.kind]
    assert knob.read({knob.alias: value}) == knob.read({knob.name: value})
    assert getattr(Config.from_env({knob.alias: value}), knob.field) is not None
    other = {"str": "y", "float": "9"}[knob.kind]
    assert knob.read({knob.alias: value, knob.name: other}) == knob.read({knob.name: other})


def test_store_limits_come_from_the_store_knobs():
    assert store_limits({}) == {}
    env = {"PYHOROVOD_STORE_MAX_VALUE_BYTES": "10", "PYHOROVOD_STORE_MAX_BYTES": "20",
           "PYHOROVOD_STORE_HANDSHAKE_SECONDS": "0.5"}
    assert store_limits(env) == {"max_value_bytes": 10, "max_total_bytes": 20, "handshake_s": 0.5}
    with pytest.raises(ValueError, match="PYHOROVOD_STORE_MAX_VALUE_BYTES must be <= 67108864"):
        store_limits({"PYHOROVOD_STORE_MAX_VALUE_BYTES": str(65 << 20)})


def test_error_messages_are_kept():
    with pytest.raises(ValueError, match=r"PYHOROVOD_SHM_SPIN_YIELD=2 must be -1, 0 or 1"):
        Config.from_env({"PYHOROVOD_SHM_SPIN_YIELD": "2"})
    with pytest.raises(ValueError, match=r"PYHOROVOD_SHM_SPIN_YIELD='-2' must be >= -1"):
        Config.from_env({"PYHOROVOD_SHM_SPIN_YIELD": "-2"})
    with pytest.raises(ValueError, match=r"PYHOROVOD_GPU_PATH='ipc' is not one of auto, nccl, staged"):
        Config.from_env({"PYHOROVOD_GPU_PATH": "ipc"})
    with pytest.raises(ValueError, match=r"HOROVOD_LOG_LEVEL='loud' is not one of trace, debug, info, warning"):
        Config.from_env({"HOROVOD_LOG_LEVEL": "loud"})


def test_tristate_and_timeline():
    c = Config.from_env({"HOROVOD_HIERARCHICAL_ALLREDUCE": "yes", "HOROVOD_HIERARCHICAL_ALLGATHER": "0",
                         "HOROVOD_TIMELINE": "dynamic"})
    assert (c.hierarchical_allreduce, c.hierarchical_allgather, c.timeline_path) == (1, 0, "")
    assert Config().hierarchical_allreduce == -1


def _names_in_the_source():
    """Every string constant under pyhorovod/ that looks like one of our or Horovod's variables."""
    import ast
    import re
    pattern = re.compile(r"^(PYHOROVOD|HOROVOD)_[A-Z0-9_]+$")
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "pyhorovod")):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
                    if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.match(node.value):
                        found.setdefault(node.value, os.path.relpath(path, ROOT))
    return found


def test_every_variable_in_the_source_is_declared():
    """A new variable read anywhere needs its row in pyhorovod/_knobs.py (or a reason in NOT_KNOBS, or a
    line in pyhorovod/_inert_env.py when it is Horovod's and does nothing here)."""
    from pyhorovod import _inert_env
    declared = {n for k in _knobs.KNOBS for n in k.names}
    missing = {n: where for n, where in _names_in_the_source().items()
               if n not in declared and n not in _knobs.NOT_KNOBS and _inert_env.reason(n) is None}
    assert not missing, f"environment variables not declared in pyhorovod/_knobs.py: {missing}"
    assert not declared & set(_knobs.NOT_KNOBS)
