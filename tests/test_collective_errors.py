"""Collectives that fail through the public API: a peer that exits and a tensor that one rank never
submits must give every waiting rank an exception that names rank, peer, op and sequence, never a hang.
Each needs a launch of its own (a rank ends or waits on purpose); the working collectives are in
test_collectives.py."""
import re
import time

import numpy as np

from mp import run_ranks


def peer_exits():
    """Rank 2 dies after one good allreduce; the others must get HorovodInternalError naming themselves,
    the op and a sequence number, not hang."""
    import os

    import pyhorovod as hvd
    hvd.init()
    rank = hvd.rank()
    assert hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum).tolist() == [3.0] * 4
    if rank == 2:
        os._exit(17)
    try:
        for i in range(20):
            hvd.allreduce(np.ones(1 << 16, np.float32), op=hvd.Sum, name=f"after.{i}")
    except hvd.HorovodInternalError as e:
        return {"type": type(e).__name__, "message": str(e)}
    return {"type": None, "message": "no error"}


def test_peer_exit_raises_horovod_internal_error():
    results = run_ranks(peer_exits, 3, timeout=90, check=False, collective_timeout=20, grace=60)
    assert results[2].returncode == 17, results[2]
    for r in (0, 1):
        res = results[r]
        assert res.returncode == 0 and res.value is not None, f"rank {r}:\n{res.stdout}\n{res.stderr}"
        msg = res.value["message"]
        assert res.value["type"] in ("HorovodInternalError", "HorovodTimeoutError"), res.value
        assert f"rank {r}" in msg, msg
        assert "allreduce" in msg.lower() and "after.0" in msg, msg        # the op and its name
        assert re.search(r"#\d+", msg), msg                                # its sequence number
        assert re.search(r"rank [0-2] \([\d.]+:\d+", msg), msg               # the peer and its address


def missing_submission(done_path):
    """Rank 0 submits a tensor rank 1 never does: rank 0 gets HorovodTimeoutError (a
    HorovodInternalError) naming the tensor and the missing rank, after PYHOROVOD_TIMEOUT_SECONDS."""
    import os

    import pyhorovod as hvd
    hvd.init()
    if hvd.rank() == 0:
        t0 = time.monotonic()
        try:
            hvd.allreduce(np.ones(3), op=hvd.Sum, name="lonely")
        except hvd.HorovodTimeoutError as e:
            assert isinstance(e, hvd.HorovodInternalError) and isinstance(e, RuntimeError)
            assert "lonely" in str(e) and "1" in str(e) and time.monotonic() - t0 < 30, str(e)
            return str(e)
        finally:
            open(done_path, "w").close()
        raise AssertionError("no timeout")
    # Stay until rank 0 has its answer: shutting down earlier would fail its request as SHUTDOWN.
    deadline = time.monotonic() + 40
    while not os.path.exists(done_path):
        assert time.monotonic() < deadline, "rank 0 never finished"
        time.sleep(0.05)
    return "idle"


def test_missing_submission_times_out(tmp_path):
    results = run_ranks(missing_submission, 2, args=(str(tmp_path / "done"),), timeout=60, collective_timeout=3)
    assert "lonely" in results[0].value and results[1].value == "idle"
