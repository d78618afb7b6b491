"""Engine features through the public API, over real processes (tests/mp.py): the stall inspector (warning
and shutdown), the timeline (parsed and checked, also after a crash and when started at run time),
process sets of odd shapes (static and dynamic), grouped allreduce, and join with uneven steps."""
import json
import os

import numpy as np
import pytest

from launch_cache import launch_once, run_sections, section, shutdown_pyhorovod
from mp import run_ranks


# ------------------------------------------------------------------ stall inspector

def body_stall_warning():
    import time
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    if r == 1:
        time.sleep(2.5)  # rank 0 has submitted 'late' and waits for us
    assert hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="late")[0] == n
    hvd.shutdown()


def test_stall_warning_names_tensor_and_missing_ranks():
    results = run_ranks(body_stall_warning, 3, timeout=60,
                        env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "0"})
    err = results[0].stderr
    assert "Stalled ops" in err, err
    assert "allreduce 'late' waited" in err and "for ranks [1]" in err, err
    assert "Stalled ops" not in results[1].stderr + results[2].stderr  # only the coordinator reports


def body_stall_shutdown():
    import time
    import pyhorovod as hvd
    hvd.init()
    r = hvd.rank()
    if r == 0:
        t = time.monotonic()
        with pytest.raises(hvd.HorovodInternalError, match="HOROVOD_STALL_SHUTDOWN_TIME_SECONDS") as info:
            hvd.allreduce(np.ones(1, np.float32), name="stuck")
        assert "allreduce 'stuck' waited" in str(info.value) and "for ranks [1]" in str(info.value)
        assert time.monotonic() - t < 8
    else:
        time.sleep(3)
        with pytest.raises(hvd.HorovodInternalError, match="stalled request exceeded"):
            hvd.allreduce(np.ones(1, np.float32), name="other")
    hvd.shutdown()


def test_stall_shutdown_errors_on_every_rank():
    run_ranks(body_stall_shutdown, 2, timeout=60,
              env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "0.5", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "1.5"})


# ------------------------------------------------------------------ timeline

def body_timeline(crash):
    import pyhorovod as hvd
    hvd.init()
    r = hvd.rank()
    for it in range(3):
        # A group is negotiated as a unit, so its members always share one fusion buffer.
        hvd.grouped_allreduce([np.full(10 * (i + 1), r, np.float32) for i in range(4)], op=hvd.Sum, name="grad")
        hvd.allreduce(np.ones(5), name="single")
        hvd.allgather(np.full((r + 1, 2), r, np.int32), name="gathered")
        hvd.broadcast(np.ones(3), root_rank=0, name="bcast")
    if crash:
        hvd.barrier()
        os._exit(0)  # no shutdown: the trace must still parse
    hvd.shutdown()


def load_trace(path, closed):
    with open(path) as f:
        text = f.read()
    assert text.startswith("[")
    if closed:
        return json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    return json.loads(text + "]")  # what chrome://tracing and perfetto accept: a missing "]"


def check_trace(events, n):
    tracks = {e["args"]["name"]: e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for name in ["grad.0", "grad.3", "gathered", "bcast"]:
        assert name in tracks, (name, sorted(tracks))
    by_tid = {}
    for e in events:
        if e["ph"] != "M":
            by_tid.setdefault(e["tid"], []).append(e)
    grad = [(e["ph"], e["name"]) for e in by_tid[tracks["grad.3"]]]
    # Negotiation with a mark per rank, queueing, copies into and out of the fusion buffer, the collective.
    for span in ["NEGOTIATE_ALLREDUCE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"]:
        assert ("B", span) in grad and ("E", span) in grad, (span, grad)
    for q in range(n):
        assert ("i", f"rank {q} ready") in grad, grad
    first = {}
    for ph, name in grad:
        first.setdefault((ph, name), len(first))
    assert first[("B", "NEGOTIATE_ALLREDUCE")] < first[("E", "NEGOTIATE_ALLREDUCE")] < first[("B", "QUEUE")]
    assert (first[("B", "MEMCPY_IN_FUSION_BUFFER")] < first[("B", "ALLREDUCE")]
            < first[("B", "MEMCPY_OUT_FUSION_BUFFER")])
    gathered = [(e["ph"], e["name"]) for e in by_tid[tracks["gathered"]]]
    assert ("B", "NEGOTIATE_ALLGATHER") in gathered and ("E", "ALLGATHER") in gathered, gathered
    assert any(e["name"] == "CYCLE_START" for e in events)
    for e in events:
        assert isinstance(e["ts"], (int, float)) and e["pid"] == 0


@pytest.mark.parametrize("crash", [False, True])
def test_timeline_is_a_valid_chrome_trace(tmp_path, crash):
    path = str(tmp_path / "timeline.json")
    run_ranks(body_timeline, 2, timeout=60, args=(crash,),
              env={"HOROVOD_TIMELINE": path, "HOROVOD_TIMELINE_MARK_CYCLES": "1"})
    check_trace(load_trace(path, closed=not crash), 2)


def body_timeline_runtime(path):
    import pyhorovod as hvd
    hvd.init()
    r = hvd.rank()
    hvd.allreduce(np.ones(3), name="before")
    hvd.start_timeline(path)
    for i in range(2):
        hvd.allreduce(np.ones(3) * r, name=f"during.{i}")
    hvd.stop_timeline()
    # A fence: the other ranks announce "after" to the coordinator (rank 0, which alone writes the trace)
    # only once rank 0 has stopped its timeline; without it they may do so while it is still recording.
    hvd.allreduce(np.ones(1), name="fence")
    hvd.allreduce(np.ones(3), name="after")
    hvd.shutdown()


def test_timeline_started_and_stopped_at_run_time(tmp_path_factory):
    path = three_ranks(tmp_path_factory)["timeline_path"]
    section(three_ranks(tmp_path_factory)["results"], "timeline_runtime")
    events = load_trace(path, closed=True)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"during.0", "during.1"} <= names and not names & {"before", "after"}, names
    assert not any(e["name"] == "CYCLE_START" for e in events)


# ------------------------------------------------------------------ process sets, groups, join

SETS = [[0, 4], [1, 2, 3], [3], [4, 2, 0]]


def body_process_sets():
    import pyhorovod as hvd
    from pyhorovod import _core, basics
    sets = [hvd.ProcessSet(s) for s in SETS]
    hvd.init(process_sets=sets)
    r = hvd.rank()
    handles = []
    for ps in sets:  # several sets in flight at once, with the same tensor name in each
        if r in ps.ranks:
            handles.append((ps, hvd.allreduce_async(np.full(4, r + 1, np.int64), op=hvd.Sum, name="x", process_set=ps),
                            hvd.allgather_async(np.full((r, 1), r, np.int32), name="g", process_set=ps),
                            hvd.broadcast_async(np.full(2, r, np.float32), root_rank=max(ps.ranks), name="b",
                                                process_set=ps)))
        else:
            # The engine itself refuses a request for a set this rank is not in.
            x = np.ones(1, np.float32)
            with pytest.raises(_core.InvalidArgumentError, match=f"rank {r} is not a member of process set"):
                basics.engine().enqueue(_core.ALLREDUCE, "x", _core.FLOAT32, [1], x.ctypes.data, x.ctypes.data,
                                        process_set=ps.process_set_id)
    for ps, hx, hg, hb in handles:
        members = sorted(ps.ranks)
        assert (hvd.synchronize(hx) == sum(m + 1 for m in members)).all()
        want = np.concatenate([np.full((m, 1), m, np.int32) for m in members])
        assert np.array_equal(hvd.synchronize(hg), want)
        assert (hvd.synchronize(hb) == members[-1]).all()
    # Any rank's shutdown stops every rank (as in Horovod): wait until all sets' work is done everywhere.
    hvd.barrier()
    hvd.shutdown()


def test_static_process_sets_of_odd_shapes():
    run_ranks(body_process_sets, 5, timeout=90)


def body_dynamic_sets():
    import pyhorovod as hvd
    hvd.init(process_sets="dynamic")
    r, n = hvd.rank(), hvd.size()
    for ranks in ([2, 0], [1], list(range(n - 1, 0, -1))):
        ps = hvd.add_process_set(ranks)
        if r in ranks:
            out = hvd.allreduce(np.full(3, r, np.float64), op=hvd.Sum, name="dyn", process_set=ps)
            assert (out == sum(ranks)).all(), out
        hvd.remove_process_set(ps)
    # A set that differs across ranks is a mismatch on every rank.
    with pytest.raises(hvd.HorovodInternalError, match="Mismatched add_process_set arguments"):
        hvd.add_process_set([0, 1] if r == 0 else [0, 2])
    hvd.shutdown()


def test_dynamic_process_sets(tmp_path_factory):
    section(three_ranks(tmp_path_factory)["results"], "dynamic_sets")


def body_grouped():
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    for it in range(3):
        tensors = [np.full(k + 1, (r + 1) * k, np.float32) for k in range(6)]
        outs = hvd.grouped_allreduce(tensors, op=hvd.Sum, name=f"grp{it}" if it else None)
        for k, out in enumerate(outs):
            assert (out == k * n * (n + 1) // 2).all(), (k, out)
    hvd.shutdown()


def test_grouped_allreduce(tmp_path_factory):
    section(three_ranks(tmp_path_factory)["results"], "grouped")


def body_join():
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    steps = [2, 5, 1, 3][r]  # uneven data; rank 1 finishes last
    for s in range(steps):
        out = hvd.allreduce(np.full(5, r + 1, np.float32), op=hvd.Sum, name=f"step.{s}")
        want = sum(q + 1 for q in range(n) if [2, 5, 1, 3][q] > s)  # joined ranks contribute zeros
        assert (out == want).all(), (s, out, want)
        # Large enough for the ring, whose chunk owners apply Average's 1/n -- a joined rank owns a chunk
        # too and must scale its zeros' share like everybody else.
        big = hvd.allreduce(np.full(300_001, r + 1, np.float32), op=hvd.Average, name=f"avg.{s}")
        assert np.array_equal(big, np.full(300_001, want / n, np.float32)), (s, big[:3], want)
        mx = hvd.allreduce(np.full(2, r - 10, np.int32), op=hvd.Max, name=f"max.{s}")
        assert (mx == max(q - 10 for q in range(n) if [2, 5, 1, 3][q] > s)).all(), (s, mx)
    last = hvd.join()
    assert last == 1, last
    # After everybody joined, collectives work as before.
    assert hvd.allreduce(np.ones(1, np.float32), op=hvd.Sum, name="after")[0] == n
    hvd.shutdown()


def test_join_with_uneven_steps():
    run_ranks(body_join, 4, timeout=60)


# ------------------------------------------------------------------ one launch for the 3-rank bodies

def body_three(timeline_path):
    """The 3-rank bodies without special knobs, one after another in one launch (each inits and shuts
    down; the timeline one first, so that no other section's names can reach its trace)."""
    return run_sections([("timeline_runtime", lambda: body_timeline_runtime(timeline_path)),
                         ("dynamic_sets", body_dynamic_sets), ("grouped", body_grouped)],
                        after_failure=shutdown_pyhorovod)


def three_ranks(tmp_path_factory):
    def launch():
        path = str(tmp_path_factory.mktemp("timeline") / "runtime.json")
        return {"timeline_path": path, "results": run_ranks(body_three, 3, timeout=90, args=(path,))}
    return launch_once("engine_features/3", launch)


# ------------------------------------------------------------------ squared-norm taps (noise scale)

def body_norm_taps():
    import pyhorovod as hvd
    from pyhorovod import _core, basics
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    eng = basics.engine()
    sums = np.zeros(4)   # [in, out] for float32 (fused small tensors), [in, out] for a float64 one
    a = [np.arange(1, 6, dtype=np.float32) * (r + 1), np.full(3, r - 1.5, np.float32)]
    big = np.linspace(-1, 1, 300_000) * (r + 2)   # 2.4 MB: reduced alone, in place
    handles = [eng.enqueue(_core.ALLREDUCE, f"t{i}", _core.FLOAT32, [x.size], x.ctypes.data, x.ctypes.data,
                           reduce_op=_core.AVERAGE, sumsq_in=sums.ctypes.data, sumsq_out=sums.ctypes.data + 8)
               for i, x in enumerate(a)]
    handles.append(eng.enqueue(_core.ALLREDUCE, "big", _core.FLOAT64, [big.size], big.ctypes.data,
                               big.ctypes.data, reduce_op=_core.SUM, sumsq_in=sums.ctypes.data + 16,
                               sumsq_out=sums.ctypes.data + 24))
    # fill_from: the buffer is filled from the float64 values as the request is enqueued.
    send = np.zeros(2, np.float32)
    src = np.array([r + 0.5, -(r + 1.0)])
    handles.append(eng.enqueue(_core.ALLREDUCE, "send", _core.FLOAT32, [2], send.ctypes.data, send.ctypes.data,
                               reduce_op=_core.SUM, fill_from=src.ctypes.data))
    for h in handles:
        eng.wait(h)
    local = [np.arange(1, 6) * (r + 1), np.full(3, r - 1.5)]
    mean = [np.arange(1, 6) * (n + 1) / 2, np.full(3, (n - 1) / 2 - 1.5)]
    assert sums[0] == pytest.approx(sum((x ** 2).sum() for x in local), rel=1e-6)
    assert sums[1] == pytest.approx(sum((x ** 2).sum() for x in mean), rel=1e-6)
    ramp = np.linspace(-1, 1, 300_000)
    assert sums[2] == pytest.approx(((ramp * (r + 2)) ** 2).sum(), rel=1e-12)
    assert sums[3] == pytest.approx(((ramp * sum(k + 2 for k in range(n))) ** 2).sum(), rel=1e-12)
    assert send.tolist() == [sum(k + 0.5 for k in range(n)), -sum(k + 1.0 for k in range(n))]
    # Taps on anything but a host float32/float64 allreduce are refused before anything runs.
    x, y = np.ones(2, np.int32), np.ones(2, np.float32)
    for what, kw in [("int32", dict(dtype=_core.INT32, buf=x, sumsq_in=sums.ctypes.data)),
                     ("broadcast", dict(op=_core.BROADCAST, buf=y, sumsq_out=sums.ctypes.data)),
                     ("out of place", dict(buf=y, out=np.ones(2, np.float32), fill_from=src.ctypes.data))]:
        buf, out = kw.pop("buf"), kw.pop("out", None)
        with pytest.raises(_core.InvalidArgumentError, match="taps|fill_from"):
            eng.enqueue(kw.pop("op", _core.ALLREDUCE), what, kw.pop("dtype", _core.FLOAT32), [2],
                        buf.ctypes.data, (buf if out is None else out).ctypes.data, **kw)
    hvd.shutdown()


@pytest.mark.parametrize("size", [2, 3])
def test_norm_taps_sum_squares_of_inputs_and_results(size):
    run_ranks(body_norm_taps, size, timeout=60)
