"""os.fork() in an initialized rank of a `pyhorovod run` job. The child inherits the engine's sockets and
shared memory but not its threads: it must see pyhorovod as not initialized, exit at once, get a clear
error from a collective, never disturb the parent's job, and may start a job of its own. Fork-based
workers (multiprocessing, torch DataLoader) keep working, and see the parent's rank."""
import json
import os
import re
import signal
import time

import pytest

from mp import run_ranks
from runner_util import kill_leftovers, run_launcher, write_script

SCRIPT = """
import json, os, sys, time
import numpy as np
import pyhorovod as hvd


def report(**fields):
    print("RESULT " + json.dumps(fields), flush=True)


def worker_view(i):
    return [i, hvd.rank(), hvd.size(), hvd.is_initialized()]


def child(mode):
    report(who="child", initialized=hvd.is_initialized(), rank=hvd.rank(), size=hvd.size())
    if mode == "allreduce":
        start = time.monotonic()
        try:
            hvd.allreduce(np.ones(4, np.float32), name="from.child")
            report(who="child", error=None)
        except ValueError as e:
            report(who="child", error=str(e), seconds=time.monotonic() - start)
        try:
            hvd.init()
            report(who="child", init_error=None)
        except ValueError as e:
            report(who="child", init_error=str(e))
    elif mode == "new-job":
        for name in [n for n in os.environ if n.startswith(("PYHOROVOD_", "HOROVOD_"))]:
            del os.environ[name]   # no rank variables left: a one-process job of its own
        hvd.init()
        out = hvd.allreduce(np.arange(3, dtype=np.int64), op=hvd.Sum, name="own")
        report(who="child", new_size=hvd.size(), new_result=out.tolist())
        hvd.shutdown()
    sys.exit(0)


mode = sys.argv[1]
hvd.init()
hvd.allreduce(np.ones(4, np.float32), name="before")
if mode == "workers":
    import multiprocessing
    with multiprocessing.get_context("fork").Pool(2) as pool:
        report(who="pool", views=pool.map(worker_view, range(4)))
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Shard(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.tensor([i * 10 + hvd.rank(), int(hvd.is_initialized())])

    loader = DataLoader(Shard(), batch_size=4, num_workers=2, multiprocessing_context="fork")
    report(who="loader", batches=[b.tolist() for b in loader])
elif hvd.rank() == 0:
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        child(mode)
    _, status = os.waitpid(pid, 0)
    report(who="parent", child_status=status, child_seconds=time.monotonic() - start)
sums = [hvd.allreduce(np.full(5, (hvd.rank() + 1) * step, np.int32), op=hvd.Sum, name=f"after.{step}").tolist()
        for step in range(10)]
report(who="rank", rank=hvd.rank(), sums=sums)
"""


def run(tmp_path, mode):
    script = write_script(tmp_path, "fork_job.py", SCRIPT)
    r = run_launcher(["-np", "2", "python", script, mode], timeout=120, env={"PYHOROVOD_TIMEOUT_SECONDS": "40"})
    results = [(int(rank), json.loads(text)) for rank, text in re.findall(r"^\[(\d+)\]<stdout>:RESULT (.*)$",
                                                                         r.stdout, re.M)]
    return r, results


def check_parent_job_completed(r, results):
    """Both ranks ran every collective after the fork, with exact results."""
    assert r.returncode == 0, r
    want = [[3 * step] * 5 for step in range(10)]   # (1 + 2) * step
    ranks = {value["rank"]: value["sums"] for _, value in results if value["who"] == "rank"}
    assert ranks == {0: want, 1: want}, r


def one(results, who):
    found = [value for _, value in results if value["who"] == who]
    assert found, results
    return found


def test_a_forked_child_that_exits_is_not_initialized_and_gone_at_once(tmp_path):
    r, results = run(tmp_path, "exit")
    check_parent_job_completed(r, results)
    assert one(results, "child") == [{"who": "child", "initialized": False, "rank": 0, "size": 2}], r
    (parent,) = one(results, "parent")
    assert parent["child_status"] == 0, r
    assert parent["child_seconds"] < 2.0, r   # before: 31 s, its exit waited for the parent's engine thread
    print(f"MEASURED fork child that exits: gone {parent['child_seconds']:.3f} s after fork(); parent job exact")


def test_a_collective_in_a_forked_child_fails_clearly_and_the_parent_is_unaffected(tmp_path):
    r, results = run(tmp_path, "allreduce")
    check_parent_job_completed(r, results)
    view, failed, refused = one(results, "child")
    assert view == {"who": "child", "initialized": False, "rank": 0, "size": 2}, r
    assert re.fullmatch(r"pyhorovod is not initialized in this process \(pid \d+\): it was forked from pid \d+, "
                        r"which is initialized, and the engine does not survive a fork\. Run collectives in the "
                        r"parent, or call pyhorovod\.init\(\) here with the rank variables of a new job\.",
                        failed["error"] or ""), r
    assert re.match(r"pyhorovod\.init\(\) in a process forked from rank 0 of 2 \(pid \d+\): its environment "
                    r"still names the parent's job", refused["init_error"] or ""), r
    (parent,) = one(results, "parent")
    assert parent["child_status"] == 0 and parent["child_seconds"] < 2.0, r
    print(f"MEASURED fork child allreduce: ValueError after {failed['seconds'] * 1e6:.0f} us; child gone "
          f"{parent['child_seconds']:.3f} s after fork(); parent job exact")


def test_a_forked_child_may_start_a_job_of_its_own(tmp_path):
    r, results = run(tmp_path, "new-job")
    check_parent_job_completed(r, results)
    view, own = one(results, "child")
    assert own == {"who": "child", "new_size": 1, "new_result": [0, 1, 2]}, r
    (parent,) = one(results, "parent")
    assert parent["child_status"] == 0 and parent["child_seconds"] < 5.0, r


def test_fork_pool_and_dataloader_workers_see_the_parents_rank_and_are_not_initialized(tmp_path):
    pytest.importorskip("torch")
    r, results = run(tmp_path, "workers")
    check_parent_job_completed(r, results)
    for rank in (0, 1):
        pools = [v for k, v in results if k == rank and v["who"] == "pool"]
        assert pools == [{"who": "pool", "views": [[i, rank, 2, False] for i in range(4)]}], r
        loaders = [v for k, v in results if k == rank and v["who"] == "loader"]
        want = [[[i * 10 + rank, 0] for i in range(b, b + 4)] for b in (0, 4)]
        assert loaders == [{"who": "loader", "batches": want}], r


def body_parent_dies_while_its_child_lives():
    import numpy as np
    import pyhorovod as hvd
    hvd.init()
    hvd.allreduce(np.ones(4, np.float32), name="before")
    if hvd.rank() == 0:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)   # a long-lived worker, holding whatever it inherited
            os._exit(0)
        print(f"child {pid} killing at {time.time()}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        while True:
            hvd.allreduce(np.ones(4, np.float32), name="after")
    except hvd.HorovodInternalError as e:
        return {"at": time.time(), "error": str(e)}


def test_the_peers_notice_a_dead_parent_while_its_forked_child_lives():
    # The child closes its copies of the parent's sockets: were they open, the peers would not see the
    # parent's connections close until the child exited (here: never within the test).
    results = run_ranks(body_parent_dies_while_its_child_lives, 2, timeout=90, check=False, grace=40,
                        collective_timeout=30)
    found = re.search(r"child (\d+) killing at ([\d.]+)", results[0].stdout)
    try:
        assert results[0].returncode == -signal.SIGKILL and found, results
        assert results[1].returncode == 0 and results[1].value is not None, results
        assert "rank 0" in results[1].value["error"], results
        seconds = results[1].value["at"] - float(found.group(2))
        assert seconds < 10, results   # about 1 s (the failure board's wait); 30 s were the deadline
        print(f"MEASURED parent rank killed while its forked child lives: peer raised after {seconds:.2f} s")
    finally:
        kill_leftovers([int(found.group(1))] if found else [])
