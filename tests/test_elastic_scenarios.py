"""Elastic jobs under the real driver (`pyhorovod run --min-np ...`), with workers killed for real.

Every "host" is a loopback address of this machine (127.0.0.1, 127.0.0.2, ...): the driver starts the
workers locally, and each reports its address as its host name, so ranks group by host as on a cluster.
The job is tests/elastic_job.py. Each run is checked for what elastic training promises:
  * every worker that finished has the same final parameters;
  * no committed progress is lost beyond the last commit: after a restore, the commit counter is at most
    one commit behind the furthest commit any worker reported;
  * each epoch trained on every sample, none twice but for the sampler's padding (a partition is padded
    to a multiple of the ranks: at most size - 1 repeats per partition).
"""
import json
import os
import subprocess
import threading
import time

import pytest

from netns import Network, cleanup_stale, netns_unavailable_reason
from runner_util import ROOT, clean_env, launcher_argv, stop

JOB = os.path.join(ROOT, "tests", "elastic_job.py")


def hosts(n, slots=1, first=1):
    return ",".join(f"127.0.0.{first + i}:{slots}" for i in range(n))


class Run:
    """One launcher run; on_line(run, record) sees each EJ record as it arrives (to change hosts)."""

    def __init__(self, args, env=None, on_line=None, timeout=150, prefix=()):
        self.records, self.stderr, self.code = [], "", None
        job_env = {"PYHOROVOD_ELASTIC_RESET_TIMEOUT_SECONDS": "20", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "20"}
        job_env.update(env or {})
        self.argv = [*prefix, *launcher_argv([*args, "python", JOB])]
        proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=clean_env(job_env), cwd=ROOT, start_new_session=True)
        err = []
        reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
        reader.start()
        self.stdout = []
        deadline = time.monotonic() + timeout
        timer = threading.Timer(timeout, stop, (proc,))
        timer.start()
        try:
            for line in proc.stdout:
                self.stdout.append(line)
                if "EJ " in line:
                    record = json.loads(line.split("EJ ", 1)[1])
                    self.records.append(record)
                    if on_line is not None:
                        on_line(self, record)
            self.code = proc.wait(10)
        finally:
            timer.cancel()
            stop(proc)
        reader.join(10)
        self.stderr = "".join(err)
        if time.monotonic() > deadline:
            raise AssertionError(f"the elastic job ran past the test's {timeout} s limit\n{self}")

    def __repr__(self):
        return (f"{self.argv}\nexit {self.code}\n--- stdout\n{''.join(self.stdout)}\n--- stderr\n{self.stderr}")

    def of(self, kind):
        return [r for r in self.records if r["kind"] == kind]


def check_promises(run, final_size, epochs=3, samples=40):
    assert run.code == 0, run
    ends = run.of("end")
    assert len(ends) == final_size and {e["size"] for e in ends} == {final_size}, run
    assert sorted(e["rank"] for e in ends) == list(range(final_size)), run
    assert all(e["params"] == ends[0]["params"] for e in ends), run
    # Committed progress: a worker starting train after a restore resumes at most one commit behind.
    best = 0
    for r in run.records:
        if r["kind"] == "commit":
            best = max(best, r["commits"])
        elif r["kind"] == "restore":
            assert r["commits"] >= best - 1, (r, best, run)
    seen = ends[0]["seen"]
    assert len(seen) == epochs, run
    generations = run.stderr.count("] generation ")
    for epoch, counts in enumerate(seen):
        assert len(counts) == samples and min(counts) == 1 and max(counts) <= 2, (epoch, counts, run)
        assert sum(counts) - samples <= generations * (final_size + 2), (epoch, counts, run)
    return ends


def test_worker_killed_mid_allreduce_the_others_go_on():
    run = Run(["-np", "4", "--min-np", "2", "-H", hosts(4)], env={"EJ_FAULTS": "2:5:kill-allreduce"})
    check_promises(run, 3)
    assert run.of("restore") and "worker 2 (rank 2, host 127.0.0.3" in run.stderr, run
    assert "generation 1: 3 worker(s)" in run.stderr, run


def test_worker_killed_mid_sync_broadcast():
    run = Run(["-np", "3", "--min-np", "2", "-H", hosts(3)], env={"EJ_FAULTS": "1:0:kill-sync"})
    check_promises(run, 2)
    assert "generation 1: 2 worker(s)" in run.stderr, run


def test_worker_killed_mid_commit():
    run = Run(["-np", "3", "--min-np", "2", "-H", hosts(3)], env={"EJ_FAULTS": "1:4:kill-commit"})
    check_promises(run, 2)
    assert [f for f in run.of("fault") if f["what"] == "kill-commit"], run


def test_exception_in_user_code_on_one_rank():
    run = Run(["-np", "3", "--min-np", "2", "-H", hosts(3)], env={"EJ_FAULTS": "0:3:raise"})
    ends = check_promises(run, 2)
    assert "worker 0 fails on purpose" in run.stderr and "host 127.0.0.1 blacklisted" in run.stderr, run
    assert {e["worker"] for e in ends} == {"1", "2"}, run


def test_hosts_added_then_removed_by_discovery(tmp_path):
    script, listing = _discovery(tmp_path, ["127.0.0.1", "127.0.0.2"]), tmp_path / "hosts"
    phase, grown_at = ["2"], []

    def change_hosts(run, record):
        if record["kind"] != "commit":
            return
        if phase[0] == "2" and record["size"] == 2 and record["commits"] >= 3:
            listing.write_text("127.0.0.1\n127.0.0.2\n127.0.0.3\n127.0.0.4\n")
            phase[0] = "4"
        elif phase[0] == "4" and record["size"] == 4:
            grown_at.append(record["commits"])
            if record["commits"] >= grown_at[0] + 2:
                listing.write_text("127.0.0.1\n127.0.0.2\n")
                phase[0] = "back to 2"

    run = Run(["-np", "2", "--min-np", "2", "--max-np", "4", "--host-discovery-script", str(script)],
              env={"EJ_EPOCHS": "5", "EJ_SAMPLES": "64", "EJ_SLEEP": "0.2"}, on_line=change_hosts)
    assert phase[0] == "back to 2", run
    check_promises(run, 2, epochs=5, samples=64)
    sizes = [r["size"] for r in run.of("start")]
    assert 4 in sizes and sizes[-1] == 2, run
    # Adding and removing hosts is not a failure: nobody goes back to a commit.
    assert run.of("restore") == [], run
    assert "the worker leaves at the next generation" in run.stderr, run


def test_below_min_np_then_hosts_back_after_cooldown():
    # Workers 1 and 2 die at the same step: one survivor, fewer than --min-np 2. Their hosts are
    # blacklisted for 1-2.4 s, then return; the driver starts workers there and the job goes on.
    run = Run(["-np", "3", "--min-np", "2", "-H", hosts(3), "--blacklist-cooldown-range", "1", "2",
               "--elastic-timeout", "60"],
              env={"EJ_FAULTS": "1:5:kill-allreduce,2:5:kill-allreduce", "EJ_SAMPLES": "48"})
    ends = check_promises(run, 3, samples=48)
    assert "fewer than --min-np 2: waiting up to 60 s" in run.stderr, run
    assert {e["worker"] for e in ends} == {"0", "3", "4"}, run   # new workers on the returned hosts


def _discovery(tmp_path, listed):
    listing = tmp_path / "hosts"
    listing.write_text("".join(f"{h}\n" for h in listed))
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {listing}\n")
    script.chmod(0o755)
    return str(script)


def test_below_min_np_past_the_elastic_timeout_fails_naming_why(tmp_path):
    script = _discovery(tmp_path, ["127.0.0.1", "127.0.0.2"])
    run = Run(["-np", "2", "--min-np", "2", "--host-discovery-script", script, "--elastic-timeout", "3"],
              env={"EJ_FAULTS": "1:3:kill-allreduce"})
    assert run.code == 1, run
    assert ("only 1 worker(s) available, fewer than --min-np 2, for longer than --elastic-timeout 3 s"
            in run.stderr), run
    assert "worker 1 (rank 1, host 127.0.0.2" in run.stderr, run


def test_fixed_hosts_that_cannot_reach_min_np_fail_at_once():
    run = Run(["-np", "2", "--min-np", "2", "-H", hosts(2)], env={"EJ_FAULTS": "1:3:kill-allreduce"})
    assert run.code == 1 and "the hosts are fixed" in run.stderr, run


def test_every_worker_failing_ends_the_job(tmp_path):
    script = _discovery(tmp_path, ["127.0.0.1", "127.0.0.2", "127.0.0.3"])
    run = Run(["-np", "3", "--min-np", "1", "--host-discovery-script", script],
              env={"EJ_FAULTS": "0:2:raise,1:2:raise,2:2:raise"})
    assert run.code == 1 and "every host is blacklisted" in run.stderr, run


def test_reset_limit_reached():
    run = Run(["-np", "4", "--min-np", "1", "-H", hosts(4), "--reset-limit", "1"],
              env={"EJ_FAULTS": "1:3:kill-allreduce,2:7:kill-allreduce"})
    assert run.code == 1 and "the --reset-limit" in run.stderr, run
    assert "generation 1: 3 worker(s)" in run.stderr, run


@pytest.mark.skipif(netns_unavailable_reason() is not None, reason=str(netns_unavailable_reason()))
def test_host_cut_off_the_network_is_dropped():
    # Three hosts as network namespaces; the driver runs on host 0 and reaches the others through the
    # rsh agent on hv0; the job's traffic (store and ranks) uses hv1. Host 2's hv1 goes down mid-training:
    # its peers' transfers stall and fail, the survivors ask for a place, host 2's worker cannot (the
    # store is behind the cut link), so the driver stops it after the reset timeout and the job goes on.
    cleanup_stale()
    with Network(hosts=3, subnets=2) as net:
        cut = []

        def cut_link(run, record):
            if not cut and record["kind"] == "commit" and record["commits"] >= 3:
                net.hosts[2].link("hv1", up=False)
                cut.append(time.monotonic())

        listed = ",".join(f"{h.addr('hv0')}:1" for h in net.hosts)
        run = Run(["-np", "3", "--min-np", "2", "-H", listed, "--rsh-agent", net.rsh_agent(),
                   "--network-interfaces", "hv1"],
                  env={"EJ_SAMPLES": "48", "EJ_SLEEP": "0.1", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "3",
                       "PYHOROVOD_ELASTIC_RESET_TIMEOUT_SECONDS": "5", "PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "20"},
                  on_line=cut_link, prefix=net.hosts[0].argv([]), timeout=180)
        assert cut, run
        check_promises(run, 2, samples=48)
        assert "did not ask for a place within 5 s of the others (cut off or hung)" in run.stderr, run
        assert f"host {net.hosts[2].addr('hv0')} blacklisted" in run.stderr, run


HOROVOD_SCRIPT = """
import os, signal
import torch
import torch.nn.functional as F
import horovod.torch as hvd

hvd.init()
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(60, 4), torch.randint(0, 3, (60,)))
model = torch.nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(data, shuffle=True)
loader = torch.utils.data.DataLoader(data, batch_size=5, sampler=sampler)

def on_state_reset():
    for group in optimizer.param_groups:
        group["lr"] = 0.1 * hvd.size()
    print(f"reset: rank {hvd.rank()} of {hvd.size()}", flush=True)

state = hvd.elastic.TorchState(model, optimizer, train_sampler=sampler, epoch=0, batch=0)
state.register_reset_callbacks([on_state_reset])

@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, 2):
        state.train_sampler.set_epoch(state.epoch)
        for state.batch, (x, y) in enumerate(loader):
            if os.environ["PYHOROVOD_WORKER_ID"] == "1" and state.epoch == 1 and state.batch == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            state.train_sampler.record_batch(state.batch, 5)
            state.commit()
        state.batch = 0

train(state)
print("final", hvd.rank(), hvd.size(), [round(v, 6) for v in model.weight.flatten().tolist()], flush=True)
"""


def test_a_horovod_elastic_script_runs_with_the_horovod_alias(tmp_path):
    script = tmp_path / "horovod_elastic.py"
    script.write_text(HOROVOD_SCRIPT)
    r = subprocess.run(launcher_argv(["-np", "3", "--min-np", "2", "-H", hosts(3), "--horovod-compat",
                                      "python", str(script)]),
                       capture_output=True, text=True, timeout=150, env=clean_env(), cwd=ROOT)
    finals = [l.split("final ", 1)[1] for l in r.stdout.splitlines() if "final " in l]
    assert r.returncode == 0 and len(finals) == 2, r
    assert len({f.split(" ", 2)[2] for f in finals}) == 1, r   # identical weights
    assert "reset: rank 1 of 2" in r.stdout and "reset: rank 0 of 2" in r.stdout, r


def test_the_others_train_on_while_an_added_worker_starts(tmp_path):
    # The new worker (id 2) takes 3 s more between its start and its init. The running workers hear of it
    # only once it has asked for a place, so they keep committing at size 2 meanwhile (announced at its
    # start, they would wait in their reset for its whole start-up).
    script, listing = _discovery(tmp_path, ["127.0.0.1", "127.0.0.2"]), tmp_path / "hosts"
    booted = []

    def add_host(run, record):
        if record["kind"] == "commit" and record["commits"] == 3 and not booted:
            listing.write_text("127.0.0.1\n127.0.0.2\n127.0.0.3\n")
            booted.append(None)
        elif record["kind"] == "boot":
            booted.append(len(run.records))

    run = Run(["-np", "2", "--min-np", "2", "--max-np", "3", "--host-discovery-script", str(script)],
              env={"EJ_EPOCHS": "6", "EJ_SAMPLES": "96", "EJ_SLEEP": "0.1", "EJ_SLOW_START": "2:3"},
              on_line=add_host)
    check_promises(run, 3, epochs=6, samples=96)   # 144 batches at size 2 would take >= 14 s: it joins
    assert len(booted) == 2, run
    joined = next(i for i, r in enumerate(run.records) if r["kind"] == "start" and r["size"] == 3)
    during_start = [r for r in run.records[booted[1]:joined] if r["kind"] == "commit" and r["size"] == 2]
    assert len(during_start) >= 3, (len(during_start), run)   # (0 when they wait for it)
