"""Resets of real worker processes under a tiny in-test driver (tests/elastic_util.py): a worker
SIGKILLed mid-training, and host changes raising HostsUpdatedInterrupt at the same commit on every rank."""
import json
import os

import pytest

from elastic_util import TinyDriver, events

torch = pytest.importorskip("torch")

DATASET = 30
BATCH = 2
EPOCHS = 3


def _features(indices):
    import torch
    return torch.tensor([[i / 10.0, (i % 3) / 3.0, 1.0, ((7 * i) % 5) / 5.0] for i in indices])


def training_body(out_dir, commit_every, pause_s):
    """TorchState + DistributedOptimizer + ElasticSampler; logs each commit, sync and reset as JSON lines."""
    import time
    import torch
    import pyhorovod.torch as hvd

    wid = os.environ["PYHOROVOD_WORKER_ID"]
    log_file = open(os.path.join(out_dir, f"{wid}.log"), "a", buffering=1)

    def log(kind, **fields):
        log_file.write(json.dumps({"kind": kind, "rank": hvd.rank(), "size": hvd.size(), **fields}) + "\n")

    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                   named_parameters=model.named_parameters(), lr_scaling="linear")
    sampler = hvd.elastic.ElasticSampler(list(range(DATASET)), shuffle=True, seed=3)
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, commits=0, epochs_done={})
    state.register_reset_callbacks([lambda: log("reset")])
    plain_sync = state.sync

    def logged_sync():
        plain_sync()
        log("sync", commits=state.commits)
    state.sync = logged_sync

    def commit():
        state.commits += 1
        try:
            state.commit()
        except hvd.elastic.HostsUpdatedInterrupt as e:
            log("interrupt", commits=state.commits, skip_sync=e.skip_sync)
            raise
        log("commit", commits=state.commits)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, EPOCHS):
            state.sampler.set_epoch(state.epoch)
            batches = -(-len(state.sampler) // BATCH)
            for b in range(batches):
                idx = state.sampler.get_indices(b, BATCH)
                x = _features(idx)
                loss = ((model(x).squeeze(1) - x.sum(1)) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                state.sampler.record_batch(b, BATCH)
                if (b + 1) % commit_every == 0:
                    commit()
                time.sleep(pause_s)
            commit()   # the epoch's last batches
            # Keyed by epoch: train() re-entered after the epoch's last commit records it again, alike.
            state.epochs_done[str(state.epoch)] = sorted(state.sampler.committed)
        commit()
        return {"params": [p.detach().tolist() for p in model.parameters()], "rank": hvd.rank(),
                "lr": opt.applied_lr(),
                "size": hvd.size(), "epochs_done": state.epochs_done, "commits": state.commits}

    return train(state)


def _check_counters(out_dir, worker):
    """The committed counter never goes back by more than one commit: each sync starts at most one
    below the last counter this worker saw committed."""
    last = 0
    for e in events(out_dir, worker):
        if e["kind"] == "commit":
            assert e["commits"] >= last, (worker, e, last)
            last = e["commits"]
        elif e["kind"] == "sync":
            assert e["commits"] >= last - 1, (worker, e, last)
            last = e["commits"]


def _check_epochs(result):
    """Every epoch's committed indices are the whole dataset."""
    assert sorted(result["epochs_done"]) == [str(e) for e in range(EPOCHS)], result["epochs_done"]
    for indices in result["epochs_done"].values():
        assert indices == list(range(DATASET))


def test_a_killed_worker_leaves_two_that_reform_and_finish_alike(tmp_path):
    driver = TinyDriver(training_body, workers=3, args=(str(tmp_path), 2, 0.05), timeout=200)
    driver.start()
    driver.wait_for(lambda: sum(e["kind"] == "commit" for e in events(str(tmp_path), 1)) >= 4,
                    "worker 1's fourth commit")
    driver.kill(1)
    results = driver.finish()
    survivors = [results[0].value, results[2].value]
    assert all(v is not None for v in survivors), driver.report()
    assert survivors[0]["params"] == survivors[1]["params"]
    assert [v["rank"] for v in survivors] == [0, 1] and all(v["size"] == 2 for v in survivors)
    assert survivors[0]["commits"] == survivors[1]["commits"]
    # lr_scaling="linear" follows the job: 2 workers at the end, and rank 0 said so once.
    assert all(v["lr"] == [pytest.approx(0.02)] for v in survivors)
    assert results[0].stderr.count("lr_scaling=linear: 2 workers instead of 3") == 1, results[0].stderr
    assert driver.generations[0] == ["w0", "w1", "w2"] and driver.generations[-1] == ["w0", "w2"]
    for w in (0, 2):
        _check_counters(str(tmp_path), w)
        assert any(e["kind"] == "reset" and e["size"] == 2 for e in events(str(tmp_path), w))
    for v in survivors:
        _check_epochs(v)


def test_host_updates_interrupt_every_rank_at_the_same_commit(tmp_path):
    out = str(tmp_path)
    driver = TinyDriver(training_body, workers=2, args=(out, 1, 0.15), timeout=200)
    driver.start()

    def commits_of_worker_1():
        return max([e["commits"] for e in events(out, 1) if e["kind"] == "commit"], default=0)
    driver.wait_for(lambda: commits_of_worker_1() >= 3, "three commits")
    driver.publish_hosts(1, removed_only=False)
    driver.wait_for(lambda: any(e["kind"] == "interrupt" for e in events(out, 1)), "the first interrupt")
    first = [e["commits"] for e in events(out, 1) if e["kind"] == "interrupt"][0]
    driver.wait_for(lambda: commits_of_worker_1() >= first + 3, "commits after the first interrupt")
    driver.publish_hosts(2, removed_only=True)
    results = driver.finish()
    assert results[0].value["params"] == results[1].value["params"]
    interrupts = [[(e["commits"], e["skip_sync"]) for e in events(out, w) if e["kind"] == "interrupt"]
                  for w in (0, 1)]
    assert interrupts[0] == interrupts[1] and [s for _, s in interrupts[0]] == [False, True], interrupts
    for w in (0, 1):
        evs = events(out, w)
        kinds = [e["kind"] for e in evs]
        # Nothing was restored: the counter after each interrupt's reset goes on from the interrupted commit.
        first, second = [i for i, k in enumerate(kinds) if k == "interrupt"]
        assert kinds[first + 1:first + 3] == ["reset", "sync"] and evs[first + 2]["commits"] == evs[first]["commits"]
        assert kinds[second + 1] == "reset" and kinds[second + 2] == "commit", kinds   # skip_sync: no sync
        assert evs[second + 2]["commits"] == evs[second]["commits"] + 1
        _check_counters(out, w)
    assert len(driver.generations) == 3
    for v in (results[0].value, results[1].value):
        _check_epochs(v)


@pytest.mark.parametrize("removed_only", [False, True])
def test_a_worker_joins_a_job_of_one_and_gets_its_state(tmp_path, removed_only):
    """removed_only=True (skip_sync on the old worker) cannot leave the newcomer syncing alone: they vote."""
    out = str(tmp_path)
    driver = TinyDriver(training_body, workers=1, args=(out, 1, 0.1), timeout=200)
    driver.start()
    driver.wait_for(lambda: sum(e["kind"] == "commit" for e in events(out, 0)) >= 3, "three commits of one worker")
    driver.add_worker()
    driver.publish_hosts(1, removed_only=removed_only)
    results = driver.finish()
    first, joined = results[0].value, results[1].value
    # Worker 0 trained alone with its gradient hooks in place; from the join on both reduce alike.
    assert first["params"] == joined["params"] and first["commits"] == joined["commits"]
    assert first["lr"] == joined["lr"] == [pytest.approx(0.02)]
    interrupted = [e["commits"] for e in events(out, 0) if e["kind"] == "interrupt"]
    synced = [e["commits"] for e in events(out, 1) if e["kind"] == "sync"]
    assert len(interrupted) == 1 and synced == interrupted    # the newcomer starts from rank 0's commit
    kinds = [e["kind"] for e in events(out, 0)]
    at = kinds.index("interrupt")
    assert kinds[at:at + 3] == ["interrupt", "reset", "sync"], kinds
    assert driver.generations == [["w0"], ["w0", "w1"]]
    for v in (first, joined):
        _check_epochs(v)
    _check_counters(out, 0)


def first_init_body():
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.full((5,), hvd.rank() + 1.0), op=hvd.Sum, name="after_first_init")
    return {"rank": hvd.rank(), "size": hvd.size(), "sum": total.tolist()}


def test_a_first_generation_that_cannot_form_is_followed_by_the_next(tmp_path):
    # The first generation names a third member that never comes (as when one dies while the engines
    # connect): each worker's very first init() fails after the connect timeout, asks again, and joins
    # the next generation, of the two that live, instead of ending the process.
    driver = TinyDriver(first_init_body, workers=2, timeout=90, phantom_in_first=True,
                        env={"PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "3"})
    driver.start()
    results = driver.finish()
    assert driver.generations == [["w0", "w1", "phantom"], ["w0", "w1"]], driver.report()
    assert sorted((r.value["rank"], r.value["size"], r.value["sum"]) for r in results) == [
        (0, 2, [3.0] * 5), (1, 2, [3.0] * 5)], driver.report()
    for r in results:
        assert "the generation failed to form" in r.stderr, driver.report()
