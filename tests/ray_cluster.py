"""The real Ray cluster the Ray test modules share (ray.cluster_utils.Cluster): a head without CPUs and three
worker nodes, each its own raylet with 2 CPUs and a custom resource naming it ("node_a", "node_b",
"node_c"), so that the tests see which node each rank ran on.

Starting it takes about 10 s on 2 cores, so it is started once, by the first test that asks for it
(shared()), and stopped by conftest.py as soon as the next test comes from a module that does not use it
(release_before()), so it does not idle behind the tests that follow. A module that uses it imports the
`cluster` fixture of tests/test_ray.py, which calls shared().
"""
import os

from mp import free_port
from time_budget import alarm_after

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
NODES = ("node_a", "node_b", "node_c")
_running = None   # the cluster, while it runs


def shared():
    """The running cluster, started first if need be, with this process connected to it (ray.init)."""
    global _running
    if _running is None:
        import ray
        from ray.cluster_utils import Cluster
        with alarm_after(120, "the Ray cluster's start"):
            # The dashboard serves Ray's state API, which the tests check leftovers with; any free port.
            c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": True,
                                                              "dashboard_port": free_port()})
            c.named = {name: c.add_node(num_cpus=2, resources={name: 100}) for name in NODES}
            # The workers import the test files' functions by name (cloudpickle pickles them by reference).
            ray.init(address=c.address, runtime_env={"env_vars": {"PYTHONPATH": f"{ROOT}:{TESTS}"}})
            c.wait_for_nodes()
        _running = c
    return _running


def release_before(nextitem):
    """Stops the cluster unless the next test (None at the end) comes from a module that uses it."""
    global _running
    if _running is None or (nextitem is not None and "cluster" in vars(nextitem.module)):
        return
    import ray
    c, _running = _running, None
    ray.shutdown()
    c.shutdown()
