"""Automatic names (requests made without name=): they must stay equal across ranks whenever the ranks'
sequences of accepted calls are equal, meet again after one rank ran ahead, restart with every init(),
and refuse unnamed calls from several threads at once instead of letting them time out.

Every body returns what each rank observed; the tests check exact values on every rank. Numbered names
belong to the handle path (allgather_async + synchronize): a blocking unnamed call reuses one
synchronous name instead (tests/test_sync_path.py), so the bodies below gather through _gather."""

import numpy as np
import pytest

from mp import run_ranks


def _gather(hvd, x, **kw):
    """An unnamed allgather by the handle path, which numbers its name."""
    return hvd.synchronize(hvd.allgather_async(x, **kw))


def rejected_call_keeps_numbers():
    """Rank 1 makes a named call twice (the second is refused: the name is in flight) and an unnamed
    call that only the engine refuses (a negative dimension, which the public API would catch earlier);
    neither may consume an automatic number, so the unnamed allgathers that follow pair up."""
    import pyhorovod as hvd
    from pyhorovod import _api, _core
    hvd.init()
    rank = hvd.rank()
    refused = []
    if rank == 1:
        hvd.allgather_async(np.ones(2, np.float32), name="dup")
        buf = np.ones(2, np.float32)
        calls = (lambda: hvd.allgather_async(np.ones(2, np.float32), name="dup"),
                 lambda: _api.submit([_api.Op(_core.ALLGATHER, _core.FLOAT32, (-1,), buf.ctypes.data)], buf,
                                     lambda rs: None))
        for call in calls:
            try:
                call()
            except ValueError as e:
                refused.append(type(e).__name__)
    out = [_gather(hvd, np.full(1, rank + 10 * i, np.int32), timeout=20).tolist() for i in range(3)]
    return {"refused": refused, "out": out}


def test_a_refused_call_consumes_no_number():
    results = run_ranks(rejected_call_keeps_numbers, 2, timeout=90, collective_timeout=20)
    assert results[1].value["refused"] == ["ValueError", "ValueError"]
    for r in (0, 1):
        assert results[r].value["out"] == [[0, 1], [10, 11], [20, 21]], results[r].value


def one_rank_ran_ahead(signal_path):
    """Rank 0 makes one unnamed allgather more than rank 1 (it times out: rank 1 never makes it; rank 1
    waits for a file that rank 0 writes after the timeout). The next unnamed allgathers pair up again."""
    import os
    import time

    import pyhorovod as hvd
    hvd.init()
    rank = hvd.rank()
    first = _gather(hvd, np.full(1, rank, np.int32)).tolist()
    message = ""
    if rank == 0:
        try:
            _gather(hvd, np.zeros(1, np.int32), timeout=2)
        except hvd.HorovodTimeoutError as e:
            message = str(e)
        open(signal_path, "w").close()
    else:
        deadline = time.monotonic() + 30
        while not os.path.exists(signal_path) and time.monotonic() < deadline:
            time.sleep(0.01)
    after = [_gather(hvd, np.full(1, rank + 10 * i, np.int32), timeout=20).tolist() for i in range(1, 3)]
    return {"first": first, "message": message, "after": after}


def test_counters_meet_again_after_one_rank_ran_ahead(tmp_path):
    results = run_ranks(one_rank_ran_ahead, 2, args=(str(tmp_path / "go"),), timeout=90, collective_timeout=30)
    for r in (0, 1):
        assert results[r].value["first"] == [0, 1]
        assert results[r].value["after"] == [[10, 11], [20, 21]], results[r].value
    msg = results[0].value["message"]
    assert "'allgather.noname.2'" in msg and "ranks [1] never submitted it; rank 1 had nothing pending" in msg, msg


def names_differ():
    """Rank 1's automatic counter is ahead (as after calls that only it made) and it has an unnamed
    allgather pending; rank 0's unnamed allgather times out, and its error says what rank 1 has pending
    and that the automatic names differ."""
    import pyhorovod as hvd
    from pyhorovod import _api, _core
    hvd.init()
    if hvd.rank() == 1:
        _api._auto_names[(_core.ALLGATHER, 0)] = 5
        handles = [hvd.allgather_async(np.zeros(1, np.int32), timeout=5),
                   hvd.allgather_async(np.zeros(1, np.int32), name="mine", timeout=5)]
        errors = []
        for h in handles:  # neither can run: they time out after rank 0's request did
            try:
                hvd.synchronize(h)
            except hvd.HorovodTimeoutError as e:
                errors.append(type(e).__name__)
        return errors
    import time
    message = "no error"
    try:
        _gather(hvd, np.zeros(1, np.int32), timeout=2)
    except hvd.HorovodTimeoutError as e:
        message = str(e)
    time.sleep(5)  # until rank 1's requests have timed out too
    return message


def test_a_timeout_names_what_the_missing_rank_has_pending():
    results = run_ranks(names_differ, 2, timeout=90, collective_timeout=30)
    assert results[1].value == ["HorovodTimeoutError"] * 2
    msg = results[0].value
    assert "allgather 'allgather.noname.1'" in msg and "ranks [1] never submitted it" in msg, msg
    assert "rank 1 had pending: " in msg and "'allgather.noname.6'" in msg and "'mine'" in msg, msg
    assert "automatic names differ" in msg and "name=" in msg, msg


def threads_unnamed(signal_path):
    """Rank 0: three threads make unnamed allreduces while the main thread's unnamed allreduce is in
    flight (it cannot finish: rank 1 makes it only after rank 0's threads are done, told by a file).
    Each is refused at once with a ValueError that says to name them; the main thread's request and a
    later unnamed call work on both ranks."""
    import os
    import threading
    import time

    import pyhorovod as hvd
    hvd.init()
    rank = hvd.rank()
    outcomes = []
    if rank == 0:
        h0 = hvd.allreduce_async(np.ones(4, np.float32), op=hvd.Sum)

        def worker():
            try:
                hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum)
                outcomes.append("ran")
            except ValueError as e:
                outcomes.append("refused" if "name=" in str(e) and "thread" in str(e) else f"other: {e}")

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        open(signal_path, "w").close()
    else:
        deadline = time.monotonic() + 30
        while not os.path.exists(signal_path) and time.monotonic() < deadline:
            time.sleep(0.01)
        h0 = hvd.allreduce_async(np.ones(4, np.float32), op=hvd.Sum)
    first = hvd.synchronize(h0).tolist()
    after = hvd.allreduce(np.full(3, rank, np.float32), op=hvd.Sum, timeout=20).tolist()
    return {"outcomes": outcomes, "first": first, "after": after}


def test_unnamed_calls_from_several_threads_are_refused_at_once(tmp_path):
    results = run_ranks(threads_unnamed, 2, args=(str(tmp_path / "go"),), timeout=90, collective_timeout=30)
    assert results[0].value["outcomes"] == ["refused"] * 3, results[0].value
    for r in (0, 1):
        v = results[r].value
        assert v["first"] == [2.0] * 4 and v["after"] == [1.0] * 3, v


def threads_different_ops():
    """Threads that use different op types do not conflict (their names count separately)."""
    import threading

    import pyhorovod as hvd
    hvd.init()
    rank = hvd.rank()
    results = {}

    def gather():
        results["gather"] = [hvd.allgather(np.full(1, rank + i, np.int64)).tolist() for i in range(20)]

    t = threading.Thread(target=gather)
    t.start()
    results["sum"] = [hvd.allreduce(np.full(2, i, np.float64), op=hvd.Sum).tolist() for i in range(20)]
    t.join()
    return results


def test_threads_with_different_op_types_run_unnamed():
    results = run_ranks(threads_different_ops, 2, timeout=90, collective_timeout=30)
    for r in (0, 1):
        v = results[r].value
        assert v["gather"] == [[i, i + 1] for i in range(20)], v
        assert v["sum"] == [[2.0 * i] * 2 for i in range(20)], v


def restart_counts_again():
    """shutdown(); init() restarts the counters on every rank, even if they differed before."""
    import pyhorovod as hvd
    hvd.init()
    rank = hvd.rank()
    if rank == 0:
        for _ in range(3):
            hvd.allgather_async(np.zeros(1, np.int32))  # never made by rank 1: failed by shutdown()
    hvd.barrier()  # rank 1 shuts down (which stops every rank) only after rank 0's submissions
    hvd.shutdown()
    hvd.init()
    return [hvd.allgather(np.full(1, rank + i, np.int32), timeout=20).tolist() for i in range(2)]


@pytest.mark.parametrize("size", [1, 2])
def test_counters_restart_with_init(size):
    results = run_ranks(restart_counts_again, size, timeout=90, collective_timeout=30)
    for r in range(size):
        assert results[r].value == [list(range(i, i + size)) for i in range(2)], results[r].value
