"""pyhorovod.ray.RayExecutor on a real Ray cluster started here (tests/ray_cluster.py: a head without CPUs
and three worker nodes, each its own raylet with 2 CPUs and a custom resource naming it), so that the
tests see which node each rank ran on. One cluster serves every test; each test has a hard time limit
(SIGALRM)."""
import os
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install pyhorovod[ray])")
import ray_cluster  # noqa: E402
from ray_cluster import NODES, ROOT  # noqa: E402
from time_budget import budget, hard_timeout  # noqa: E402,F401 -- hard_timeout: autouse

K_STEPS = 3
LOCAL_BATCH = 4
DEFAULT_BUDGET_S = 60   # seconds per test, unless its @budget says otherwise


@pytest.fixture(scope="module")
def cluster():
    return ray_cluster.shared()   # stopped by conftest.py after the last module that uses it


def node_names():
    """Ray node id -> our name for it (its custom resource)."""
    out = {}
    for n in ray.nodes():
        names = [r for r in n["Resources"] if r in NODES]
        if n["Alive"] and names:
            out[n["NodeID"]] = names[0]
    return out


def executor(**kw):
    from pyhorovod.ray import RayExecutor
    timeout_s = kw.pop("timeout_s", 90)   # a loaded 2-core machine starts 4 Python workers slowly
    return RayExecutor(RayExecutor.create_settings(timeout_s=timeout_s), **kw)


def alive_leftovers():
    """Actors and placement groups of ours that Ray still holds (its state API)."""
    from ray.util.state import list_actors, list_placement_groups
    actors = [a for a in list_actors(filters=[("state", "!=", "DEAD")]) if "RayWorker" in a.class_name
              or "Queue" in a.class_name]
    groups = [g for g in list_placement_groups() if g.state != "REMOVED"]
    return actors, groups


def assert_nothing_left():
    deadline = time.monotonic() + 20
    while True:
        actors, groups = alive_leftovers()
        if not actors and not groups:
            return
        assert time.monotonic() < deadline, f"left behind: actors {actors}, placement groups {groups}"
        time.sleep(0.5)


# ---- the functions the workers run (module level: the workers import them) -------------------------

def _model():
    import torch
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()


def _batches(n):
    import torch
    g = torch.Generator().manual_seed(99)
    return [(torch.randn(n * LOCAL_BATCH, 5, generator=g, dtype=torch.float64),
             torch.randn(n * LOCAL_BATCH, 3, generator=g, dtype=torch.float64)) for _ in range(K_STEPS)]


def train(n=None, distributed=True, wrap=True):
    """K_STEPS of SGD with momentum; rank r takes rows [r*B, (r+1)*B) of each global batch. Rank 0
    reports each step's loss to the driver. Returns the final parameters and where the rank ran."""
    import torch
    import pyhorovod.torch as hvd
    from pyhorovod.ray import report
    if distributed:
        hvd.init()
    r, n = (hvd.rank(), hvd.size()) if distributed else (0, n)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if distributed and wrap:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    for step, (x, y) in enumerate(_batches(n)):
        if distributed:
            x, y = x[r * LOCAL_BATCH:(r + 1) * LOCAL_BATCH], y[r * LOCAL_BATCH:(r + 1) * LOCAL_BATCH]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        report({"step": step, "rank": r})
    params = [p.detach().flatten().tolist() for p in model.parameters()]
    if not distributed:
        return params
    return {"params": params, "coords": coordinates()}


def coordinates():
    import ray as ray_
    import pyhorovod as hvd
    hvd.init()
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
            "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(),
            "node": ray_.get_runtime_context().get_node_id(), "HOROVOD_HOSTNAME": os.environ["HOROVOD_HOSTNAME"]}


def fail_on_rank_1():
    import numpy as np
    import pyhorovod as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank 1 fails on purpose")
    return float(hvd.allreduce(np.ones(1), op=hvd.Sum)[0])   # waits for rank 1, which never comes


def what_the_worker_sees():
    import pyhorovod as hvd
    from pyhorovod import _rendezvous
    hvd.init()
    child = subprocess.run([sys.executable, "-c", "import os; print(repr(dict(os.environ)))"],
                           capture_output=True, text=True, timeout=60).stdout
    return {"secret": _rendezvous.read_secret(os.environ).decode(), "env": dict(os.environ), "child_env": child}


class Counter:
    def __init__(self, start):
        self.value = start

    def bump(self, by):
        self.value += by
        return self.value


# ---- tests ---------------------------------------------------------------------------------------

def _diff(a, b):
    return max(abs(x - y) for pa, pb in zip(a, b) for x, y in zip(pa, pb))


@pytest.mark.parametrize("layout", [{"num_workers": 2}, {"num_hosts": 2, "num_workers_per_host": 2}],
                         ids=["2-workers-spread", "4-workers-2-hosts"])
@budget(90)
def test_training_equals_one_process_on_concatenated_batch(cluster, layout):
    ex = executor(**layout)
    ex.start()
    try:
        progress = []
        out = ex.run(train, callbacks=[progress.append])
        n = len(out)
        control = ex.run(train, kwargs={"wrap": False})
    finally:
        ex.shutdown()
    reference = train(n=n, distributed=False)
    for rank, result in enumerate(out):
        assert result["coords"]["rank"] == rank
        assert _diff(result["params"], reference) < 1e-12, f"rank {rank}"
    # the comparison can fail: the same shards without DistributedOptimizer end elsewhere
    assert _diff(control[1]["params"], reference) > 1e-3
    assert n == (2 if "num_workers" in layout else 4)
    coords = [r["coords"] for r in out]
    _check_coordinates(coords)
    assert len({c["node"] for c in coords}) == 2, "the ranks did not run across 2 nodes"
    if "num_hosts" in layout:   # 2 nodes, 2 consecutive ranks on each
        assert len({c["node"] for c in coords}) == 2 and coords[0]["node"] == coords[1]["node"], coords
    assert progress == [{"step": s, "rank": 0} for s in range(K_STEPS)]


def _check_coordinates(coords):
    """Ranks of one node are consecutive; local rank = position on the node; cross rank = node's index."""
    nodes = list(dict.fromkeys(c["node"] for c in coords))
    for c in coords:
        on_node = [d["rank"] for d in coords if d["node"] == c["node"]]
        assert on_node == list(range(on_node[0], on_node[0] + len(on_node))), coords
        assert (c["local_rank"], c["local_size"]) == (on_node.index(c["rank"]), len(on_node)), c
        same_local = [d["node"] for d in coords if d["local_rank"] == c["local_rank"]]
        assert (c["cross_rank"], c["cross_size"]) == (same_local.index(c["node"]), len(same_local)), c
        assert c["size"] == len(coords)
    assert len({c["HOROVOD_HOSTNAME"] for c in coords}) == len(nodes)


@budget(90)
def test_local_and_cross_ranks_follow_the_placement(cluster):
    """One worker on each node (num_hosts=3); the 2 x 2 layout is checked with the training above."""
    names = node_names()
    ex = executor(num_hosts=3, num_workers_per_host=1)
    ex.start()
    try:
        coords = ex.run(coordinates)
    finally:
        ex.shutdown()
    _check_coordinates(coords)
    assert sorted(names[c["node"]] for c in coords) == list(NODES)      # one host bundle on each node
    assert [(c["local_rank"], c["local_size"], c["cross_rank"], c["cross_size"]) for c in coords] == \
        [(0, 1, r, 3) for r in range(3)]


def _inside_a_trial():
    """Runs as a Ray task in a placement group (as a Ray Tune trial does): the executor's workers go into
    that group instead of one of their own."""
    from ray.util.placement_group import get_current_placement_group
    ex = executor(num_workers=2)
    ex.start()
    try:
        return get_current_placement_group().id.hex(), ex._pg, ex.run(coordinates)
    finally:
        ex.shutdown()


@budget(90)
def test_workers_use_the_current_placement_group(cluster):
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    assert ray.get(pg.ready(), timeout=60)
    try:
        strategy = PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=True)
        pg_id, own_pg, coords = ray.get(ray.remote(_inside_a_trial).options(
            num_cpus=0, scheduling_strategy=strategy).remote(), timeout=80)
        bundle_nodes = set(ray.util.placement_group_table(pg)["bundles_to_node_id"].values())
    finally:
        remove_placement_group(pg)
    assert pg_id == pg.id.hex() and own_pg is None
    _check_coordinates(coords)
    assert {c["node"] for c in coords} == bundle_nodes


@budget(60)
def test_failing_rank_makes_run_raise_naming_rank_and_node(cluster):
    ex = executor(num_hosts=2, num_workers_per_host=1)
    ex.start()
    try:
        host_of_1 = ex.slots[1].hostname
        t0 = time.monotonic()
        with pytest.raises(RuntimeError) as info:
            ex.run(fail_on_rank_1)
        took = time.monotonic() - t0
    finally:
        ex.shutdown()
    text = str(info.value)
    assert f"rank 1 (node {host_of_1}) raised ValueError: rank 1 fails on purpose" in text, text
    assert took < 10, f"run() took {took:.1f} s to report the failure"
    assert_nothing_left()


@budget(60)
def test_shutdown_leaves_no_actors_or_placement_groups(cluster):
    ex = executor(num_workers=2)
    ex.start(executable_cls=Counter, executable_args=[10], extra_env_vars={"MY_KNOB": "7"})
    try:
        assert alive_leftovers()[0], "the state API shows no workers of a started executor"
        assert ex.execute(lambda c: c.bump(1)) == [11, 11]
        assert ex.execute_single(lambda c: c.bump(5)) == 16
        assert ex.execute(lambda c: c.value) == [16, 11]
        assert ex.run(lambda k: os.environ.get(k), args=["MY_KNOB"]) == ["7", "7"]
        refs = ex.run_remote(lambda a, b: a * b, args=[6], kwargs={"b": 7})
        assert ray.get(refs, timeout=30) == [42, 42]
        got = []
        ex.run(train, callbacks=[got.append])
        assert [g["step"] for g in got] == list(range(K_STEPS))
    finally:
        ex.shutdown()
    assert_nothing_left()
    ex.shutdown()   # twice: harmless


@budget(60)
def test_secret_is_in_no_environment_and_no_task_name(cluster):
    from ray.util.state import list_actors, list_tasks
    ex = executor(num_workers=2)
    ex.start()
    try:
        seen = ex.run(what_the_worker_sees)
        names = [t.name for t in list_tasks()] + [a.class_name for a in list_actors()]
    finally:
        ex.shutdown()
    secret = seen[0]["secret"]
    assert len(secret) == 64 and seen[1]["secret"] == secret
    for s in seen:
        assert not any(secret in v for v in s["env"].values())
        assert not any(k.startswith("PYHOROVOD_SECRET") for k in s["env"])
        assert secret not in s["child_env"] and "PYHOROVOD_STORE_PORT" in s["child_env"]
        assert s["env"]["PYHOROVOD_STORE_ADDR"] == ray.util.get_node_ip_address() != "0.0.0.0"
    assert not any(secret in (n or "") for n in names)


@budget(60)
def test_missing_resources_fail_after_the_timeout_naming_them(cluster):
    for kw, missing in (({"num_workers": 1, "use_gpu": True}, "GPU 1 needed, the cluster has 0"),
                        ({"num_hosts": 4, "num_workers_per_host": 1}, "4 hosts asked for, but only 3 node(s)"),
                        ({"num_workers": 1, "cpus_per_worker": 3}, "no node has {CPU: 3}")):
        ex = executor(timeout_s=2, **kw)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="within 2 s") as info:
            ex.start()
        took = time.monotonic() - t0
        assert missing in str(info.value), str(info.value)
        assert 2 <= took < 15, took
    assert_nothing_left()


def test_bad_arguments_are_value_errors():
    from pyhorovod.ray import RayExecutor
    settings = RayExecutor.create_settings(timeout_s=5)
    for kw, match in (({"num_workers": 2, "num_hosts": 2}, "not both"),
                      ({}, "give num_workers"),
                      ({"num_workers": 0}, "num_workers must be a positive int"),
                      ({"num_workers": -1}, "num_workers must be a positive int"),
                      ({"num_hosts": 0}, "num_hosts must be a positive int"),
                      ({"num_hosts": 2, "num_workers_per_host": 0}, "num_workers_per_host must be a positive"),
                      ({"num_workers": 2, "cpus_per_worker": -1}, "cpus_per_worker must be a non-negative"),
                      ({"num_workers": 2, "gpus_per_worker": 1}, "needs use_gpu=True"),
                      ({"num_workers": 2.5}, "positive int")):
        with pytest.raises(ValueError, match=match):
            RayExecutor(settings, **kw)
    for bad in (0, -3, "10"):
        with pytest.raises(ValueError, match="timeout_s must be a positive number"):
            RayExecutor.create_settings(timeout_s=bad)


def test_run_before_start_is_an_error():
    ex = executor(num_workers=2)
    for call in (lambda: ex.run(coordinates), lambda: ex.run_remote(coordinates),
                 lambda: ex.execute(coordinates), lambda: ex.execute_single(coordinates)):
        with pytest.raises(RuntimeError, match="not started; call start"):
            call()


@budget(60)
def test_import_without_ray_says_how_to_install():
    code = ("import sys\n"
            "class NoRay:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'ray' or name.startswith('ray.'):\n"
            "            raise ImportError('No module named ray')\n"
            "sys.meta_path.insert(0, NoRay())\n"
            "import pyhorovod, pyhorovod.runner.launch\n"
            "assert 'ray' not in sys.modules\n"
            "try:\n"
            "    import pyhorovod.ray\n"
            "except ImportError as e:\n"
            "    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "ERR pyhorovod.ray needs Ray" in out.stdout and "pip install pyhorovod[ray]" in out.stdout, out.stdout


@budget(30)
def test_ray_nodes_as_host_discovery(cluster):
    from pyhorovod.ray.discovery import RayHostDiscovery
    names = node_names()
    found = RayHostDiscovery(cpus_per_slot=1).find_available_hosts_and_slots()
    assert sorted(found.values()) == [2, 2, 2], found      # the CPU-less head holds no worker
    d = RayHostDiscovery(cpus_per_slot=0.5)
    hosts = d.find_available_hosts_and_slots()
    assert sorted(names[d.node_id(h)] for h in hosts) == list(NODES) and set(hosts.values()) == {4}
    assert RayHostDiscovery(use_gpu=True).find_available_hosts_and_slots() == {}


def _shrunk_and_regrown(sizes, after):
    runs = [n for i, n in enumerate(sizes) if i == 0 or sizes[i - 1] != n]
    return runs[:3] == [3, 2, 3] and sizes[-after:] == [3] * after


def elastic_train(max_steps, step_s):
    """An elastic worker in Horovod's form (hvd.elastic.run over an ObjectState, a commit per step); each
    step allreduces (sum) every rank's rank, so that the state records the job's size at every step.
    Trains until the job has run at 3, 2 and again 3 workers (then 5 steps more), or max_steps."""
    import numpy as np
    import ray as ray_
    import pyhorovod as hvd
    from pyhorovod.ray import report

    @hvd.elastic.run
    def train(state):
        while state.step < max_steps and not _shrunk_and_regrown(state.sizes, 5):
            total = hvd.allreduce(np.array([float(hvd.rank())]), op=hvd.Sum)
            state.w += float(total[0])
            state.sizes = state.sizes + [hvd.size()]
            state.step += 1
            report({"step": state.step, "size": hvd.size()})
            time.sleep(step_s)
            state.commit()
        return {"state": {"step": state.step, "w": state.w, "sizes": state.sizes},
                "node": ray_.get_runtime_context().get_node_id()}

    hvd.init()
    return train(hvd.elastic.ObjectState(step=0, w=0.0, sizes=[]))


def elastic_sum(steps):
    import numpy as np
    import pyhorovod as hvd

    @hvd.elastic.run
    def train(state):
        while state.step < steps:
            state.total += float(hvd.allreduce(np.array([1.0]), op=hvd.Sum)[0])
            state.step += 1
            state.commit()
        return hvd.rank(), hvd.size(), state.total

    hvd.init()
    return train(hvd.elastic.ObjectState(step=0, total=0.0))


@budget(90)
def test_executor_elastic_mode_runs_an_elastic_function(cluster):
    """RayExecutor(settings, min_workers=..., max_workers=...): Horovod 0.28's spelling of an elastic job;
    3 nodes of one slot each, max_workers 2: two workers."""
    from pyhorovod.ray import RayExecutor
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), min_workers=1, max_workers=2, cpus_per_worker=2)
    ex.start()
    try:
        with pytest.raises(ValueError, match="run\\(\\) only"):
            ex.execute(lambda e: e)
        assert ex.run(elastic_sum, args=[4]) == [(0, 2, 8.0), (1, 2, 8.0)]
    finally:
        ex.shutdown()
    assert_nothing_left()


@budget(150)
def test_elastic_job_survives_a_removed_node_and_grows_to_an_added_one(cluster):
    """Last in the file: it changes the cluster (node_c leaves, node_d joins)."""
    import threading
    from pyhorovod.ray import ElasticRayExecutor, RayExecutor
    with pytest.raises(ValueError, match="exclude num_workers"):
        RayExecutor(RayExecutor.create_settings(), num_workers=2, min_workers=2)
    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=3, elastic_timeout=60, timeout_s=30)
    ex = ElasticRayExecutor(settings, cpus_per_slot=2)    # one worker per node
    ex.start()
    seen = []
    changed = threading.Event()
    out = {}

    def watch(m):
        seen.append(m)
        changed.set()

    def until(cond, what, limit=60):
        deadline = time.monotonic() + limit
        while not cond():
            assert time.monotonic() < deadline and "error" not in out, f"{what}: {seen[-3:]} {out}"
            changed.wait(0.5)
            changed.clear()

    def runner():
        try:
            out["results"] = ex.run(lambda: elastic_train(1000, 0.05), callbacks=[watch])
        except BaseException as e:  # noqa: BLE001 -- handed to the test's thread
            out["error"] = e
    t = threading.Thread(target=runner, daemon=True)
    t.start()
    try:
        until(lambda: any(m["size"] == 3 and m["step"] >= 5 for m in seen), "3 workers training")
        # Any node but the one this (driver) process is connected to: Ray refuses to remove that one.
        mine = ray.get_runtime_context().get_node_id()
        victim = next(n for n in ("node_c", "node_b", "node_a") if cluster.named[n].node_id != mine)
        cluster.remove_node(cluster.named[victim])
        until(lambda: seen[-1]["size"] == 2, "the 2 survivors training")
        cluster.named["node_d"] = cluster.add_node(num_cpus=2, resources={"node_d": 100})
        until(lambda: seen[-1]["size"] == 3 and len([m for m in seen if m["size"] == 2]) > 0, "grown to node_d")
        t.join(90)
    finally:
        ex.shutdown()
    assert "error" not in out, out.get("error")
    results = out["results"]
    assert len(results) == 3
    states = [r["state"] for r in results]
    assert all(s == states[0] for s in states), states          # identical final state on every worker
    sizes = states[0]["sizes"]
    assert _shrunk_and_regrown(sizes, 5) and len(sizes) == states[0]["step"] < 1000, sizes
    assert states[0]["w"] == sum(n * (n - 1) / 2 for n in sizes)
    names = {n["NodeID"]: [r for r in n["Resources"] if r.startswith("node_")] for n in ray.nodes() if n["Alive"]}
    assert sorted(names[r["node"]][0] for r in results) == sorted(set(NODES) - {victim} | {"node_d"})
    assert_nothing_left()


def test_ranks_are_ordered_node_by_node():
    """Workers placed a, b, a, c, b (bundle order) take ranks a a b b c; hostnames are the IPs, or IP/node
    id where nodes share an IP."""
    from pyhorovod.ray.placement import assign_ranks
    locations = [("aaaa" * 8, "10.0.0.1"), ("bbbb" * 8, "10.0.0.2"), ("aaaa" * 8, "10.0.0.1"),
                 ("cccc" * 8, "10.0.0.3"), ("bbbb" * 8, "10.0.0.2")]
    order, slots = assign_ranks(locations)
    assert order == [0, 2, 1, 4, 3]
    assert [(s.hostname, s.local_rank, s.local_size, s.cross_rank, s.cross_size) for s in slots] == [
        ("10.0.0.1", 0, 2, 0, 3), ("10.0.0.1", 1, 2, 0, 2), ("10.0.0.2", 0, 2, 1, 3), ("10.0.0.2", 1, 2, 1, 2),
        ("10.0.0.3", 0, 1, 2, 3)]
    _, shared = assign_ranks([("n1" * 8, "10.0.0.9"), ("n2" * 8, "10.0.0.9")])
    assert [s.hostname for s in shared] == ["10.0.0.9/n1n1n1n1n1n1", "10.0.0.9/n2n2n2n2n2n2"]
