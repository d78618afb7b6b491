"""Makes the repository root importable (pyhorovod from the source tree, built in place by `make build`)
and tests/ itself (the multi-process harness tests/mp.py), whichever way pytest is started; stops the Ray
test modules' shared cluster after the last of them."""
import os
import sys

_TESTS = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.dirname(_TESTS), _TESTS):
    if _path not in sys.path:
        sys.path.insert(0, _path)


def pytest_runtest_teardown(item, nextitem):
    cluster = sys.modules.get("ray_cluster")   # imported only where a Ray test ran
    if cluster is not None:
        cluster.release_before(nextitem)
