"""The documentation site (docs/): it builds with warnings as errors, and the API reference covers the
public API with docstrings of its own.

"Public" is a module's __all__. A docstring is "its own" when the object defines it: a function's
__doc__, a class's __doc__ in its own __dict__ (not one inherited from a base such as RuntimeError).
Names that are not callable (the reduction ops Sum, Average, ... are ints; global_process_set is a
ProcessSet instance) cannot carry a docstring of their own: the API pages describe them, which the
inventory check below verifies.
"""
import importlib
import inspect
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ("pyhorovod", "pyhorovod.torch")


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory):
    pytest.importorskip("sphinx", reason="the docs build needs Sphinx (pip install sphinx myst-parser)")
    pytest.importorskip("myst_parser", reason="the docs build needs myst-parser (pip install myst-parser)")
    pytest.importorskip("torch", reason="the API reference documents pyhorovod.torch, which needs torch")
    out = tmp_path_factory.mktemp("docs_html")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           os.path.join(ROOT, "docs"), str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    return proc, out


def test_docs_build_without_warnings(built_docs):
    proc, out = built_docs
    assert proc.returncode == 0 and not proc.stderr.strip(), (
        f"sphinx -W failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    for page in ("index", "quickstart", "launching", "pytorch", "scaling", "slow_networks", "environment",
                 "differences", "elastic", "ray", "architecture", "api/pyhorovod", "api/torch"):
        assert (out / f"{page}.html").is_file(), page


def test_readme_sections_are_included_not_copied(built_docs):
    """The environment table and the differences paragraph exist once, in README.md: the pages include
    them (a marker that went missing would make the include empty or fail)."""
    _, out = built_docs
    env = (out / "environment.html").read_text()
    for variable in ("HOROVOD_FUSION_THRESHOLD", "PYHOROVOD_TIMEOUT_SECONDS", "PYHOROVOD_GPU_PATH"):
        assert variable in env, variable
    assert "<table" in env
    differences = (out / "differences.html").read_text()
    assert "Differences from Horovod:" in differences and "HorovodTimeoutError" in differences
    for page in os.listdir(os.path.join(ROOT, "docs")):
        if page.endswith((".md", ".rst")):
            text = open(os.path.join(ROOT, "docs", page)).read()
            assert "| `HOROVOD_CYCLE_TIME` |" not in text, f"docs/{page} copies the README's table"


def _public(module_name):
    if module_name == "pyhorovod.torch":
        pytest.importorskip("torch", reason="pyhorovod.torch needs torch")
    return importlib.import_module(module_name)


def _own_docstring(obj):
    if inspect.isclass(obj):
        return (obj.__dict__.get("__doc__") or "").strip()
    return (getattr(obj, "__doc__", None) or "").strip()


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_callable_has_its_own_docstring(module_name):
    module = _public(module_name)
    missing = [name for name in module.__all__
               if callable(getattr(module, name)) and not _own_docstring(getattr(module, name))]
    assert not missing, f"{module_name}: public names without a docstring of their own: {missing}"


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_name_is_in_the_api_reference(built_docs, module_name):
    from sphinx.util.inventory import InventoryFile

    proc, out = built_docs
    assert proc.returncode == 0, proc.stderr
    with open(out / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", os.path.join)
    documented = {name for kind, entries in _entries(inventory) if kind.startswith("py:") for name in entries}
    module = _public(module_name)
    missing = [name for name in module.__all__ if f"{module_name}.{name}" not in documented]
    assert not missing, f"not in docs/api: {[f'{module_name}.{n}' for n in missing]}"


def _entries(inventory):
    # Sphinx >= 8.2 returns an _Inventory object with .data; older ones a plain dict.
    data = getattr(inventory, "data", inventory)
    return [(kind, set(entries)) for kind, entries in data.items()]
