"""The one place pyhorovod's version is declared: pyproject.toml reads it (setuptools' dynamic version)
and CMakeLists.txt reads it into the C++ core (build_info()["version"])."""
__version__ = "0.2.0"
