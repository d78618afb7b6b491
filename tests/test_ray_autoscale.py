"""Autoscaling on Ray: ElasticRayExecutor / RayExecutor with autoscale="goodput" (pyhorovod/ray/autoscale.py)
on the real Ray cluster of test_ray.py (tests/ray_cluster.py: a head without CPUs and three nodes of 2 CPUs),
the same one: the fixture keeps it running from one module to the next.

The end-to-end job is built so that its decision is known in advance. Each rank's loss is
0.5 |w - z|^2 over its examples, z = MU + SIGMA x N(0, I) in D dimensions, w starting at 0: the gradient
is w - MU (|G|^2 = D MU^2) and its per-example covariance SIGMA^2 I (tr = D SIGMA^2), so B_noise =
SIGMA^2 / MU^2 = 196, and with D = 2,000 the live B_simple is within ~15% of it from the first steps (the
noise of |G_b|^2 relative to its mean falls as 1/sqrt(D)); at LR 1e-5 w hardly moves. The throughput
model, from one worker's steps and these hosts (1 slot of 2 cores on each node), predicts 3x the examples
per second at 3 workers (one rank per node, a tiny allreduce). With one worker of 8 x 2 examples the
goodput of 3 workers is then 3 x (196 + 16)/(196 + 48) = 2.6x the current one: the first evaluation
(step 20) finds 3 best, the second (step 40) confirms it and asks for 3. The job then runs AT_MAX = 40
steps at 3 workers and ends, before the 3 evaluations (60 steps) the count holds after a resize: what
the 3 workers measure on this loaded machine cannot change a decision, which lets the test assert exact
steps and counts.
"""
import csv

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install pyhorovod[ray])")

from test_ray import assert_nothing_left, cluster  # noqa: E402,F401 -- cluster: the fixture
from time_budget import budget, hard_timeout  # noqa: E402,F401 -- hard_timeout: autouse

from pyhorovod.elastic import autoscaler as A  # noqa: E402
from pyhorovod.runner import autoscale_option  # noqa: E402

DEFAULT_BUDGET_S = 60
D, MU, SIGMA = 2_000, 1.0, 14.0
LOCAL, PASSES = 8, 2
EVERY, AT_MAX = 20, 40


# ---- the functions the workers run (module level: the workers import them) -------------------------

def autoscaled_train(max_np, max_steps):
    """An elastic worker (hvd.elastic.run over an ObjectState) whose optimizer measures the noise scale and
    whose rank 0 runs the Autoscaler from the executor's environment. Ends AT_MAX steps after the job
    reached max_np workers, or at max_steps. Rank 0 returns its decisions and measured resize pauses."""
    import numpy as np
    import torch
    import pyhorovod.torch as hvd
    scaler = None

    @hvd.elastic.run
    def train(state):
        nonlocal scaler
        w = torch.nn.Parameter(torch.tensor(state.w, dtype=torch.float64))
        opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1e-5), named_parameters=[("w", w)],
                                       batch_size=LOCAL, backward_passes_per_step=PASSES, measure_noise_scale=True)
        if scaler is None:
            scaler = A.Autoscaler(opt, settle=5)
        else:
            scaler.rebind(opt)
        gen = torch.Generator().manual_seed(1000 * hvd.size() + hvd.rank() + state.step)
        while state.step < max_steps and state.at_max < AT_MAX:
            opt.zero_grad()
            for _ in range(PASSES):
                z = MU + SIGMA * torch.randn(LOCAL, D, generator=gen, dtype=torch.float64)
                (0.5 * ((w - z) ** 2).sum(1).mean() / PASSES).backward()
            opt.step()
            state.step += 1
            state.at_max += int(hvd.size() == max_np)
            if state.sizes[-1:] != [hvd.size()]:
                state.sizes = state.sizes + [hvd.size()]   # the counts the job ran at, in order
            state.w = w.detach().numpy().copy()
            scaler.step()
            state.commit()
        if hvd.rank() != 0:
            return None
        scaler.finish("the end")
        return {"decisions": [(d.step, d.current_np, d.target_np) for d in scaler.decisions],
                "pauses": scaler.decider.pauses, "sizes": state.sizes, "b_simple": scaler.estimator.b_simple()}

    hvd.init()
    return train(hvd.elastic.ObjectState(step=0, at_max=0, sizes=[], w=np.zeros(D)))


def train_without_noise_scale():
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    w = torch.nn.Parameter(torch.zeros(3))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=0.1), named_parameters=[("w", w)])
    A.Autoscaler(opt)   # raises: the optimizer does not measure the noise scale


# ---- tests ---------------------------------------------------------------------------------------------

@budget(100)
def test_autoscaled_job_on_ray_grows_from_one_worker_to_three(cluster, tmp_path):  # noqa: F811 -- the fixture
    from pyhorovod.ray import ElasticRayExecutor
    trace = str(tmp_path / "trace")
    settings = ElasticRayExecutor.create_settings(min_num_proc=1, max_num_proc=3, timeout_s=60, elastic_timeout=60,
                                                  autoscale="goodput", autoscale_every=EVERY,
                                                  autoscale_trace=trace)
    ex = ElasticRayExecutor(settings, cpus_per_slot=2, env_vars={"PYHOROVOD_NOISE_SCALE_LOG_EVERY": "0"})
    ex.start()
    try:
        results = ex.run(lambda: autoscaled_train(3, 3000))
        env = ex.driver.opts.launch.env
        assert ex.driver.opts.autoscaled and ex.driver.opts.np == 1
    finally:
        ex.shutdown()
    assert_nothing_left()
    # Ray's nodes as the autoscaler's hosts: 1 slot of 2 CPUs each (cpus_per_slot=2), cores from Ray
    hosts = A.parse_hosts(env[A.ENV_HOSTS])
    assert sorted((h.slots, h.cores) for h in hosts) == [(1, 2)] * 3
    assert (env[A.ENV], env[A.ENV_MIN], env[A.ENV_MAX], env[A.ENV_EVERY]) == ("goodput", "1", "3", "20")
    assert env[A.ENV_TRACE] == trace
    assert len(results) == 3 and results[1:] == [None, None]
    r = results[0]
    assert r["sizes"] == [1, 3], r
    asked = [d for d in r["decisions"] if d[2] is not None]
    assert asked[0] == (EVERY * 2, 1, 3), r["decisions"]          # the second evaluation confirms 3
    assert r["decisions"][0] == (EVERY, 1, None)
    assert len(r["pauses"]) == 1 and 0 < r["pauses"][0] < 60      # the resize's pause, measured
    assert 150 < r["b_simple"] < 250                                # B_noise 196 (w hardly moves)
    with open(trace + ".csv") as f:
        lines = f.read().splitlines()
    rows = list(csv.DictReader(lines[:-1]))
    counts = [int(row["workers"]) for row in rows]
    assert counts[0] == 1 and counts[-1] == 3 and sorted(set(counts)) == [1, 3]
    assert [row["target_np"] for row in rows][:2] == ["", "3"]
    assert "1 of 2 confirmations" in rows[0]["reason"] and "grow to 3 workers" in rows[1]["reason"]
    assert lines[-1].startswith("# worker-seconds to the end: ")


@budget(60)
def test_a_job_that_does_not_measure_the_noise_scale_gets_the_autoscalers_error(cluster):  # noqa: F811
    """RayExecutor's elastic mode: the worker's ValueError reaches run() at once (not retried on every node)."""
    from pyhorovod.ray import RayExecutor
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), min_workers=1, max_workers=2, cpus_per_worker=2,
                     autoscale="goodput")
    ex.start()
    try:
        with pytest.raises(ValueError, match=r"measure_noise_scale=True, batch_size="):
            ex.run(train_without_noise_scale)
        # Only the first worker ever ran the function. (A second worker may have been started on the free
        # slot before the failure came in; it is let go without a rank.)
        assert [w.seq for w in ex._elastic.driver.workers if w.rank is not None] == [0]
    finally:
        ex.shutdown()
    assert_nothing_left()


def test_bad_autoscale_options_are_value_errors_naming_the_parameter():
    from pyhorovod.ray import ElasticRayExecutor, RayExecutor
    create = ElasticRayExecutor.create_settings
    with pytest.raises(ValueError, match=r"autoscale='goodput' needs min_num_proc and max_num_proc"):
        create(min_num_proc=1, autoscale="goodput")
    with pytest.raises(ValueError, match=r"autoscale='pollux': the policy must be one of goodput"):
        create(1, 3, autoscale="pollux")
    for kw, match in (({"autoscale_every": 0}, "autoscale_every must be an int >= 1"),
                      ({"autoscale_every": 2.5}, "autoscale_every must be an int >= 1"),
                      ({"autoscale_margin": -0.1}, "autoscale_margin is a fraction"),
                      ({"autoscale_cores_per_host": 0}, "autoscale_cores_per_host must be an int >= 1"),
                      ({"autoscale_trace": 3}, "autoscale_trace must be a path prefix")):
        with pytest.raises(ValueError, match=match):
            create(1, 3, autoscale="goodput", **kw)
    assert create(1, 3).autoscale is None and create(1, 3, autoscale_every=0).autoscale is None
    settings = RayExecutor.create_settings()
    with pytest.raises(ValueError, match=r"autoscale='goodput' needs min_workers and max_workers"):
        RayExecutor(settings, min_workers=1, autoscale="goodput")
    with pytest.raises(ValueError, match="autoscale needs an elastic job"):
        RayExecutor(settings, num_workers=2, autoscale="goodput")
    with pytest.raises(ValueError, match="autoscale_margin is a fraction"):
        RayExecutor(settings, min_workers=1, max_workers=2, autoscale="goodput", autoscale_margin=11)


def test_ray_and_the_launcher_share_one_env_builder():
    """The same settings give the same worker environment from either front end."""
    import argparse
    from pyhorovod.ray import ElasticRayExecutor
    p = argparse.ArgumentParser()
    p.add_argument("--min-np", dest="min_np", type=int)
    p.add_argument("--max-np", dest="max_np", type=int)
    autoscale_option.add_flags(p)
    args = p.parse_args(["--autoscale", "goodput", "--min-np", "1", "--max-np", "3", "--autoscale-every", "7",
                         "--autoscale-margin", "0.2", "--autoscale-trace", "/tmp/x"])
    spec = ElasticRayExecutor.create_settings(1, 3, autoscale="goodput", autoscale_every=7, autoscale_margin=0.2,
                                              autoscale_trace="/tmp/x").autoscale
    hosts, cores = {"a": 2, "b": 1}, {"a": 4, "b": 2}
    assert autoscale_option.worker_env(spec, hosts, cores) == autoscale_option.worker_env(args, hosts, cores)
    assert autoscale_option.worker_env(spec, hosts, cores)[A.ENV_HOSTS] == "a:2:4,b:1:2"
    pinned = ElasticRayExecutor.create_settings(1, 3, autoscale="goodput", autoscale_cores_per_host=8).autoscale
    assert autoscale_option.worker_env(pinned, hosts, cores)[A.ENV_HOSTS] == "a:2:8,b:1:8"
