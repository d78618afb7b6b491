"""Builds pyhorovod._core with CMake (CMakeLists.txt) and installs the Python package.

`pip install .` and `pip install -e .` both work; PYHOROVOD_WITH_NCCL=AUTO|ON|OFF is passed to CMake,
and PYHOROVOD_BUILD_JOBS caps parallel compile jobs (default: all cores).
"""
import os
import subprocess
import sys
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
        build_dir = Path(os.environ.get("PYHOROVOD_BUILD_DIR", ROOT / "build" / "cmake"))
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
