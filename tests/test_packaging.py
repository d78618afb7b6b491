"""Packaging as a user meets it: the sdist carries everything the build needs, a wheel built from it
carries the extension, the type information and nothing else, it installs into a fresh virtual
environment without the system's packages, and the quick start runs there. One compile for all of it
(the sdist is built once per module, the wheel from it once, unoptimised); the GPU backend is left out of
this build (PYHOROVOD_WITH_NCCL=OFF), which other tests cover."""
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from mp import ROOT

QUICK_START = '''
import numpy as np
import pyhorovod as hvd
hvd.init()
x = np.full(4, hvd.rank(), dtype=np.float32)
total = hvd.allreduce(x, op=hvd.Sum)
print("result", hvd.rank(), total.tolist(), hvd.__version__, hvd.build_info()["version"], flush=True)
hvd.shutdown()
'''


def run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def version():
    ns = {}
    with open(os.path.join(ROOT, "pyhorovod", "_version.py")) as f:
        exec(f.read(), ns)
    return ns["__version__"]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    out = tmp_path_factory.mktemp("sdist")
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out), ROOT], timeout=300)
    (path,) = out.glob("pyhorovod-*.tar.gz")
    return path


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    # Build type None (no -O flags): what this module checks is the wheel's contents, its install and the
    # quick start, not speed, and an unoptimised compile takes a fraction of a Release one.
    env = dict(os.environ, PYHOROVOD_WITH_NCCL="OFF", PYHOROVOD_BUILD_JOBS=str(os.cpu_count() or 2),
               PYHOROVOD_BUILD_TYPE="None")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(sdist)],
        env=env, timeout=1200)
    (path,) = out.glob("pyhorovod-*.whl")
    return path


def test_sdist_carries_what_the_build_needs(sdist):
    assert sdist.name == f"pyhorovod-{version()}.tar.gz"
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("CMakeLists.txt", "cmake/nccl.cmake", "csrc/engine/engine.cc", "csrc/backends/cuda_kernels.cu",
                   "csrc/common/reduce.h", "pyhorovod/__init__.py", "pyhorovod/py.typed", "pyhorovod/_core.pyi",
                   "LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "setup.py"):
        assert needed in names, f"{needed} is missing from the sdist"
    # Tests travel in the sdist (packagers run them), build products never.
    leftovers = [n for n in names if n.endswith((".so", ".o", ".pyc")) or n.startswith("build/")]
    assert not leftovers, leftovers


def test_wheel_carries_the_extension_and_types_only(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert any(n.startswith("pyhorovod/_core") and n.endswith(".so") for n in names), names
    for needed in ("pyhorovod/py.typed", "pyhorovod/_core.pyi", "pyhorovod/torch/__init__.py",
                   "pyhorovod/runner/cli.py", "pyhorovod/scaling/noise_scale.py"):
        assert needed in names, f"{needed} is missing from the wheel"
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    with zipfile.ZipFile(wheel) as z:
        metadata = z.read(meta).decode()
        entry_points = z.read(meta.replace("METADATA", "entry_points.txt")).decode()
    assert f"Version: {version()}" in metadata and "License" in metadata
    assert "Provides-Extra: ray" in metadata and "Provides-Extra: torch" in metadata
    # horovodrun belongs to Horovod: installing pyhorovod must not replace it
    assert "pyhorovod = pyhorovod.runner.cli:main" in entry_points and "horovodrun" not in entry_points
    stray = [n for n in names
             if n.startswith(("tests/", "csrc/", "build/", "benchmarks/")) or n.endswith((".o", ".pyc"))]
    assert not stray, stray


def test_wheel_installs_into_a_fresh_venv_and_the_quick_start_runs(wheel, tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    py = str(venv / "bin" / "python")
    # numpy and cloudpickle (the dependencies) from the index; pyhorovod from the wheel.
    run([py, "-m", "pip", "install", "-q", str(wheel)], timeout=600)
    script = tmp_path / "allsum.py"
    script.write_text(QUICK_START)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYHOROVOD_", "HOROVOD_"))}
    out = run([py, "-m", "pyhorovod.run", "-np", "2", py, str(script)], cwd=str(tmp_path), env=env, timeout=120)
    lines = sorted(line.split("result ", 1)[1] for line in out.splitlines() if "result " in line)
    assert lines == [f"{r} [1.0, 1.0, 1.0, 1.0] {version()} {version()}" for r in (0, 1)], out
    # The installed package is the venv's, not this checkout's.
    where = run([py, "-c", "import pyhorovod; print(pyhorovod.__file__)"], cwd=str(tmp_path), env=env)
    assert str(venv) in where, where


@pytest.mark.skipif(shutil.which("auditwheel") is None, reason="auditwheel is not installed")
def test_auditwheel_gives_a_manylinux_wheel(wheel, tmp_path):
    out = run(["auditwheel", "repair", "-w", str(tmp_path), str(wheel)], timeout=300)
    (repaired,) = tmp_path.glob("pyhorovod-*manylinux*.whl")
    assert repaired.exists(), out
