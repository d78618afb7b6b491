"""The training job of the elastic scenario tests (tests/test_elastic_scenarios.py), run by the real
driver: a linear model, an ElasticSampler, a TorchState committed every COMMIT_EVERY batches, and faults
planted by the test.

The state also counts, for every epoch, how often each sample was trained on by any rank (the ranks'
batches are gathered each step): being part of the state, the counts are saved and restored with the
model, so at the end they say exactly which steps the job kept -- a step applied twice or skipped shows.

Environment: EJ_SAMPLES, EJ_EPOCHS, EJ_SLEEP (seconds per step), EJ_FAULTS: "worker:batches:kind" items
separated by commas; kind is kill-allreduce (SIGKILL while the gradients' allreduces run),
kill-sync (SIGKILL during the state's broadcast), kill-commit (SIGKILL between save and the host check),
raise (an exception in user code). `batches` is the state's step counter when the fault fires (for
kill-sync: the first sync at or after it). EJ_SLOW_START "worker:seconds": that worker reports "boot"
and sleeps so long before its init (a slow start-up). Each line the job prints for the test begins with "EJ ".
"""
import json
import os
import signal
import threading
import time

import torch

import pyhorovod.torch as hvd

N = int(os.environ.get("EJ_SAMPLES", "40"))
EPOCHS = int(os.environ.get("EJ_EPOCHS", "3"))
SLEEP = float(os.environ.get("EJ_SLEEP", "0.05"))
BATCH, COMMIT_EVERY = 2, 2
WORKER = os.environ["PYHOROVOD_WORKER_ID"]
FAULTS = [f.split(":") for f in os.environ.get("EJ_FAULTS", "").split(",") if f]


def report(kind, **fields):
    print("EJ " + json.dumps(dict(kind=kind, worker=WORKER, **fields)), flush=True)


def fault(state, kind):
    for worker, at, what in FAULTS:
        if worker == WORKER and what == kind and state.batches >= int(at):
            report("fault", what=what, batches=state.batches)
            if kind == "raise":
                raise RuntimeError(f"worker {WORKER} fails on purpose")
            if kind == "kill-sync":   # from another thread, while this one is inside the broadcasts
                threading.Timer(0.002, os.kill, (os.getpid(), signal.SIGKILL)).start()
                return
            os.kill(os.getpid(), signal.SIGKILL)


class JobState(hvd.elastic.TorchState):
    def save(self):
        super().save()
        fault(self, "kill-commit")

    def sync(self):
        fault(self, "kill-sync")
        super().sync()

    def restore(self):
        super().restore()
        report("restore", batches=self.batches, commits=self.commits)


for worker, seconds in [os.environ["EJ_SLOW_START"].split(":")] if os.environ.get("EJ_SLOW_START") else []:
    if worker == WORKER:
        report("boot")
        time.sleep(float(seconds))
hvd.init()
data = torch.Generator().manual_seed(1)
X = torch.randn(N, 8, generator=data)
Y = X @ torch.arange(8.0).unsqueeze(1)
model = torch.nn.Linear(8, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(range(N), shuffle=True, seed=3)
state = JobState(model=model, optimizer=optimizer, sampler=sampler, epoch=0, batches=0, commits=0,
                 seen=[[0] * N for _ in range(EPOCHS)])


def commit(state):
    state.commits += 1
    state.commit()
    report("commit", commits=state.commits, rank=hvd.rank(), size=hvd.size())


@hvd.elastic.run
def train(state):
    report("start", rank=hvd.rank(), size=hvd.size(), batches=state.batches, commits=state.commits)
    while state.epoch < EPOCHS:
        state.sampler.set_epoch(state.epoch)
        indices = list(state.sampler)
        for b in range(-(-len(indices) // BATCH)):
            batch = indices[b * BATCH:(b + 1) * BATCH]
            optimizer.zero_grad()
            loss = ((model(X[batch]) - Y[batch]) ** 2).mean()
            loss.backward()                 # the gradients' allreduces start here
            fault(state, "kill-allreduce")
            optimizer.step()
            for rank_batch in hvd.allgather_object(batch, name="batch"):
                for i in rank_batch:
                    state.seen[state.epoch][i] += 1
            state.sampler.record_batch(b, BATCH)
            state.batches += 1
            fault(state, "raise")
            time.sleep(SLEEP)
            if state.batches % COMMIT_EVERY == 0:
                commit(state)
        state.epoch += 1
        commit(state)
    params = [p.detach().flatten().tolist() for p in model.parameters()]
    report("end", rank=hvd.rank(), size=hvd.size(), params=params, seen=state.seen, commits=state.commits)


train(state)
