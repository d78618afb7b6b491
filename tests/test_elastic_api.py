"""The worker-side elastic API: State/ObjectState/TorchState round trips, ElasticSampler's partition
across resizes, run()'s loop (outside a driver and, with the reset faked, inside one), check_host_updates,
and sync over real ranks (tests/mp.py). Resets of real processes: tests/test_elastic_reset.py."""
import collections
import logging

import pytest

import pyhorovod
from mp import run_ranks
from pyhorovod import basics
from pyhorovod.elastic import ElasticSampler, ObjectState, State, _membership
from pyhorovod.elastic import reset as reset_module
from pyhorovod.errors import HorovodInternalError, HorovodTimeoutError, HostsUpdatedInterrupt

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------- states, in one process

def test_object_state_commit_and_restore_round_trip():
    state = ObjectState(epoch=0, history=[1, 2], nested={"a": [0]})
    state.epoch, state.history = 3, state.history + [3]
    state.nested["a"].append(9)           # mutated in place: the save must be a deep copy
    state.restore()
    assert (state.epoch, state.history, state.nested) == (0, [1, 2], {"a": [0]})
    state.epoch = 5
    state.nested["a"].append(1)
    state.commit()                        # outside a driver: a save and nothing else
    state.epoch, state.nested["a"] = 7, []
    state.restore()
    assert (state.epoch, state.nested) == (5, {"a": [0, 1]})
    state.restore()                       # restoring twice gives the same save
    assert (state.epoch, state.nested) == (5, {"a": [0, 1]})


def test_torch_state_keeps_model_and_optimizer_in_memory():
    from pyhorovod.torch.elastic import TorchState
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step():
        opt.zero_grad()
        model(torch.ones(4, 3)).sum().backward()
        opt.step()

    step()
    state = TorchState(model, opt, epoch=1)
    saved = [p.detach().clone() for p in model.parameters()]
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    for _ in range(2):                    # a restore, steps, and the same restore again
        step()
        step()
        state.epoch = 2
        state.restore()
        assert all(torch.equal(p, s) for p, s in zip(model.parameters(), saved))
        assert all(torch.equal(opt.state[p]["momentum_buffer"], m) for p, m in zip(model.parameters(), momentum))
        assert state.epoch == 1
    step()
    state.commit()
    after = [p.detach().clone() for p in model.parameters()]
    step()
    state.restore()
    assert all(torch.equal(p, s) for p, s in zip(model.parameters(), after))


def test_torch_state_is_reachable_as_hvd_elastic():
    import pyhorovod.torch as hvd
    assert hvd.elastic.TorchState.__module__ == "pyhorovod.torch.elastic.state"
    assert hvd.elastic.run is pyhorovod.elastic.run
    assert hvd.elastic.HostsUpdatedInterrupt is HostsUpdatedInterrupt
    from pyhorovod.common.exceptions import HostsUpdatedInterrupt as from_common
    assert from_common is HostsUpdatedInterrupt


# ---------------------------------------------------------------- ElasticSampler

def _samplers(n, size, epoch=0, shuffle=True, state=None):
    out = []
    for rank in range(size):
        s = ElasticSampler(list(range(n)), shuffle=shuffle, seed=5)
        s.set_epoch(epoch)
        if state is not None:
            s.load_state_dict(state)
        s._partition(rank, size)
        out.append(s)
    return out


def _process(samplers, batches, batch):
    """Each rank records its batches in `batches`; returns the indices they covered."""
    covered = []
    for s in samplers:
        for b in batches:
            s.record_batch(b, batch)
            covered += s.get_indices(b, batch)
    return covered


def _commit(samplers):
    gathered = [i for s in samplers for i in sorted(s.pending)]
    for s in samplers:
        s._commit(gathered)


def test_sampler_resize_4_to_3_processes_every_committed_sample_once():
    n, batch = 48, 3
    ranks = _samplers(n, 4)
    assert sorted(i for s in ranks for i in s) == list(range(n)) and {len(s) for s in ranks} == {12}
    committed = _process(ranks, [0, 1], batch)
    _commit(ranks)
    saved = ranks[0].state_dict()
    assert all(s.state_dict() == saved for s in ranks)
    _process(ranks, [2], batch)            # never committed: rank 3 dies before the next commit
    survivors = _samplers(n, 3, state=saved)      # restore + reset at size 3
    assert {len(s) for s in survivors} == {8}
    committed += _process(survivors, range(3), batch)   # 3 + 3 + 2
    _commit(survivors)
    assert sorted(committed) == list(range(n))
    assert survivors[0].state_dict()["processed_indices"] == list(range(n))


def test_sampler_resize_2_to_4_repeats_only_the_padding():
    n, batch = 50, 4
    ranks = _samplers(n, 2, epoch=3)
    committed = _process(ranks, range(3), batch)
    _commit(ranks)
    saved = ranks[1].state_dict()
    _process(ranks, [3], batch)             # discarded by the restore
    grown = _samplers(n, 4, epoch=3, state=saved)  # two joined and got rank 0's state at sync
    remaining = n - 24
    per_rank = -(-remaining // 4)
    assert {len(s) for s in grown} == {per_rank}
    committed += _process(grown, range(2), batch)
    _commit(grown)
    counts = collections.Counter(committed)
    assert set(counts) == set(range(n))
    repeats = sorted(i for i, c in counts.items() if c > 1)
    assert sum(c - 1 for c in counts.values()) == per_rank * 4 - remaining == 2
    order = [i for i in ranks[0]._order() if i not in set(saved["processed_indices"])]
    assert repeats == sorted(order[:2])           # the padding repeats the first remaining samples


def test_sampler_epochs_orders_and_state():
    a, b = _samplers(20, 2)
    assert a._order() == b._order() and a._order() != list(range(20))
    a.record_indices([1, 2])
    a.set_epoch(0)                                # the current epoch: progress kept
    assert a.pending == {1, 2}
    a.set_epoch(1)
    assert (a.pending, a.committed, a.epoch) == (set(), set(), 1)
    assert a._order() != b._order()
    assert ElasticSampler(list(range(5)), shuffle=False)._order() == list(range(5))
    a.record_batch(0, 3)
    state = a.state_dict()
    c = ElasticSampler(list(range(20)))
    c.load_state_dict(state)
    assert c.committed == set(state["processed_indices"]) and len(c) == 17 and c.epoch == 1
    with pytest.raises(ValueError, match="batch_size"):
        a.get_indices(0, 0)


def test_sampler_drives_a_torch_dataloader_batch_by_batch():
    sampler = ElasticSampler(list(range(10)), seed=2)
    sampler.load_state_dict({"epoch": 1, "processed_indices": [0, 1]})
    loader = torch.utils.data.DataLoader(torch.arange(10), batch_size=3, sampler=sampler)
    batches = [b.tolist() for b in loader]
    assert batches == [sampler.get_indices(i, 3) for i in range(3)] and len(loader) == 3
    assert sorted(i for b in batches for i in b) == list(range(2, 10))


def test_horovod_scripts_import_the_elastic_names(tmp_path):
    import subprocess
    import sys
    from mp import ROOT, clean_env
    from pyhorovod._compat import ALIAS_DIR
    code = ("from horovod.torch.elastic import run, TorchState, ObjectState, ElasticSampler, State; "
            "from horovod.common.exceptions import HostsUpdatedInterrupt; import horovod.torch as hvd; "
            "import pyhorovod.torch.elastic as e; "
            "assert hvd.elastic is e and TorchState is e.TorchState and "
            "HostsUpdatedInterrupt is e.HostsUpdatedInterrupt")
    env = clean_env({"PYTHONPATH": ALIAS_DIR + ":" + ROOT})
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------- check_host_updates

class _Recorder(State):
    def __init__(self, events, **kw):
        super().__init__(**kw)
        self.events = events

    def save(self):
        self.events.append("save")

    def restore(self):
        self.events.append("restore")

    def sync(self):
        self.events.append("sync")


def test_check_host_updates_outside_a_driver_communicates_nothing(monkeypatch):
    monkeypatch.delenv(_membership.ELASTIC_ENV, raising=False)

    def no_broadcast(obj):
        raise AssertionError("check_host_updates broadcast outside an elastic driver")
    state = _Recorder([], bcast_object=no_broadcast, get_rank=lambda: 0)
    for _ in range(100):
        state.commit()
    assert state.events == ["save"] * 100


def test_check_host_updates_follows_rank_0s_versions(monkeypatch):
    monkeypatch.setenv(_membership.ELASTIC_ENV, "1")
    versions = iter([(0, False), (0, False), (1, False), (1, False), (2, True)])
    monkeypatch.setattr(_membership, "host_update", lambda: next(versions))
    sent = []
    state = _Recorder([], bcast_object=lambda obj: sent.append(obj) or obj, get_rank=lambda: 0)
    state.commit()
    state.commit()
    with pytest.raises(HostsUpdatedInterrupt) as e:
        state.commit()
    assert e.value.skip_sync is False
    state.commit()
    with pytest.raises(HostsUpdatedInterrupt) as e:
        state.commit()
    assert e.value.skip_sync is True
    assert sent[2] == (1, True, False)
    # Another rank decides by what rank 0 sent, whatever its own last seen version.
    other = _Recorder([], bcast_object=lambda obj: (7, True, False), get_rank=lambda: 1)
    with pytest.raises(HostsUpdatedInterrupt):
        other.check_host_updates()
    assert other._hosts_version == 7


# ---------------------------------------------------------------- run()

def test_run_outside_a_driver_syncs_once_and_lets_errors_through(monkeypatch):
    monkeypatch.delenv(_membership.ELASTIC_ENV, raising=False)
    events = []
    state = _Recorder(events, get_rank=lambda: 0)

    @pyhorovod.elastic.run
    def train(state, a, b=0):
        events.append(("train", a, b))
        return a + b
    assert train(state, 2, b=3) == 5
    assert events == ["sync", ("train", 2, 3)]

    for error in (HorovodInternalError("peer lost"), HostsUpdatedInterrupt(False)):
        del events[:]

        @pyhorovod.elastic.run
        def failing(state):
            events.append("train")
            raise error
        with pytest.raises(type(error)):
            failing(state)
        assert events == ["sync", "train"]


def test_run_in_a_driver_restores_resets_and_calls_again(monkeypatch):
    monkeypatch.setenv(_membership.ELASTIC_ENV, "1")
    events = []
    monkeypatch.setattr(reset_module, "reset", lambda: events.append("reset"))
    monkeypatch.setattr(reset_module, "_anyone_needs_sync", lambda mine: mine)   # the vote of a job of one
    state = _Recorder(events, get_rank=lambda: 0)
    state.register_reset_callbacks([lambda: events.append("callback")])
    failures = iter([HorovodInternalError("peer lost"), HostsUpdatedInterrupt(skip_sync=True),
                     HostsUpdatedInterrupt(skip_sync=False)])

    @pyhorovod.elastic.run
    def train(state):
        events.append("train")
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return "done"
    assert train(state) == "done"
    assert events == ["sync", "train", "restore", "reset", "callback", "sync", "train",
                      "reset", "callback", "train",
                      "reset", "callback", "sync", "train"]


def test_reset_is_shutdown_then_init_even_when_the_engine_was_broken(monkeypatch, caplog):
    calls = []

    def broken_shutdown():
        calls.append("shutdown")
        raise HorovodInternalError("the engine had already failed")
    monkeypatch.setattr(basics, "shutdown", broken_shutdown)
    monkeypatch.setattr(basics, "rank", lambda: 1)
    monkeypatch.setattr(basics, "size", lambda: 2)
    monkeypatch.setattr(pyhorovod, "init", lambda: calls.append("init"))
    with caplog.at_level(logging.INFO, logger="pyhorovod.elastic"):
        reset_module.reset()
    assert calls == ["shutdown", "init"]
    assert "re-formed as rank 1 of 2" in caplog.text


def test_an_elastic_init_asks_again_after_a_failed_generation_within_the_elastic_timeout(monkeypatch, caplog):
    # The first init too: a newcomer whose first generation cannot form joins the next one.
    calls = []
    monkeypatch.setattr(basics, "_RETRY_PAUSE_S", 0.0)
    outcomes = iter([HorovodInternalError("store gone"), HorovodTimeoutError("no place"), None])

    def init_once(*args):
        calls.append("init")
        failure = next(outcomes)
        if failure is not None:
            raise failure
    monkeypatch.setattr(basics, "_init_once", init_once)
    env = {_membership.ELASTIC_ENV: "1", _membership.TIMEOUT_ENV: "60"}
    with caplog.at_level(logging.WARNING, logger="pyhorovod"):
        basics.init(env=env)
    assert calls == ["init"] * 3
    assert caplog.text.count("the generation failed to form") == 2

    env[_membership.TIMEOUT_ENV] = "0"
    monkeypatch.setattr(basics, "_init_once", lambda *a: (_ for _ in ()).throw(HorovodInternalError("down")))
    with pytest.raises(HorovodInternalError, match="kept failing to form for 0 s"):
        basics.init(env=env)
    # Outside an elastic driver nobody re-forms the job: the first failure is the caller's.
    monkeypatch.setattr(basics, "_init_once", lambda *a: (_ for _ in ()).throw(HorovodInternalError("once")))
    with pytest.raises(HorovodInternalError, match="^once$"):
        basics.init(env={})


# ---------------------------------------------------------------- learning rate

def test_lr_policy_follows_the_number_of_workers(monkeypatch, caplog):
    from pyhorovod.torch._lr_policy import LrPolicy
    monkeypatch.setattr(basics, "rank", lambda: 0)
    policy = LrPolicy("linear", 4, 1, base_batch_size=32, batch_size=16)
    assert policy.factor == 2.0
    with caplog.at_level(logging.INFO, logger="pyhorovod.torch.lr"):
        policy.rescale(3)
        policy.rescale(3)                          # no change: no line
    assert policy.factor == 1.5 and policy.global_batch == 48
    lines = [r.getMessage() for r in caplog.records if "workers instead of" in r.getMessage()]
    assert lines == ["lr_scaling=linear: 3 workers instead of 4, global batch 48, LR factor x1.5 instead of x2"]
    sqrt = LrPolicy("sqrt", 1, 2, verbose=False)
    sqrt.rescale(8)
    assert sqrt.factor == pytest.approx(4.0)


# ---------------------------------------------------------------- sync over real ranks

def sync_body():
    import numpy as np
    import pyhorovod as hvd
    hvd.init()
    r = hvd.rank()
    sampler = hvd.elastic.ElasticSampler(list(range(23)), seed=11)
    sampler.set_epoch(4 if r == 0 else r)
    sampler.record_indices([5 + r])
    state = hvd.elastic.ObjectState(value=r * 10, nested={"r": [r]}, sampler=sampler)
    state.value, state.nested["r"] = r * 10, [r, r]

    @hvd.elastic.run
    def train(state):
        synced = {"value": state.value, "nested": state.nested, "processed": sorted(sampler.committed),
                  "epoch": sampler.epoch}
        mine = sampler.get_indices(0, 2)
        sampler.record_batch(0, 2)
        state.commit()
        everyone = hvd.allgather(np.array(mine, dtype=np.int64)).tolist()
        return {"synced": synced, "committed": sorted(sampler.committed), "everyone": sorted(everyone),
                "order": sampler._order(), "size": len(sampler)}
    return train(state)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_sync_gives_every_rank_rank_0s_state_and_commit_gathers_progress(size):
    values = [r.value for r in run_ranks(sync_body, size, timeout=90)]
    for v in values:
        assert v["synced"] == {"value": 0, "nested": {"r": [0, 0]}, "processed": [5], "epoch": 4}
        assert v["committed"] == sorted([5] + v["everyone"])
        assert v["order"] == values[0]["order"] and v["size"] == -(-22 // size)
    assert values[0]["committed"] == values[-1]["committed"]


def torch_sync_body():
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (hvd.rank() + 1))
    opt.zero_grad()
    model(torch.ones(2, 3) * (hvd.rank() + 1)).sum().backward()
    opt.step()
    state = hvd.elastic.TorchState(model, opt, step=hvd.rank())

    @hvd.elastic.run
    def train(state):
        return {"params": [p.detach().tolist() for p in model.parameters()], "step": state.step,
                "lr": opt.param_groups[0]["lr"],
                "exp_avg": [opt.state[p]["exp_avg"].tolist() for p in model.parameters()]}
    out = train(state)
    model.weight.data.add_(1.0)
    state.restore()                                # the sync was saved: restore goes back to rank 0's
    out["restored"] = [p.detach().tolist() for p in model.parameters()] == out["params"]
    return out


def test_torch_state_sync_broadcasts_rank_0s_model_and_optimizer():
    values = [r.value for r in run_ranks(torch_sync_body, 3, timeout=90)]
    assert all(v == values[0] for v in values[1:])
    assert values[0]["step"] == 0 and values[0]["lr"] == 0.01 and values[0]["restored"]
