"""Builds pyhorovod._core with CMake (CMakeLists.txt) and installs the Python package.

`pip install .` and `pip install -e .` both work; PYHOROVOD_WITH_NCCL=AUTO|ON|OFF is passed to CMake,
and PYHOROVOD_BUILD_JOBS caps parallel compile jobs (default: all cores). Each interpreter builds in its
own CMake folder (build/cmake-<interpreter tag>, or PYHOROVOD_BUILD_DIR): CMake caches the Python it found,
so two Python versions sharing one folder would build against the wrong headers.

Why setuptools and not scikit-build-core: `pip install -e .` here builds the extension in place, next to
the sources, which `make build`, the tests and several checkouts side by side rely on; what broke with
setuptools was only the sdist's contents (MANIFEST.in) and the shared build folder, both fixed here.
"""
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        tag = f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}"
        build_dir = Path(os.environ.get("PYHOROVOD_BUILD_DIR", ROOT / "build" / f"cmake-{tag}"))
        build_dir.mkdir(parents=True, exist_ok=True)
        cfg = [
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('PYHOROVOD_BUILD_TYPE', 'Release')}",
            f"-DPYHOROVOD_WITH_NCCL={os.environ.get('PYHOROVOD_WITH_NCCL', 'AUTO')}",
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={target.parent}",
        ]
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build_dir)] + cfg)
        jobs = os.environ.get("PYHOROVOD_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "_core", "-j", jobs])


setup(ext_modules=[CMakeExtension("pyhorovod._core")], cmdclass={"build_ext": CMakeBuild})
