"""Single-copy collectives between ranks of one host (PYHOROVOD_SHM_DIRECT_BYTES; csrc/algorithms/direct_copy.h,
csrc/transport/cross_memory.h), over real processes.

The public API runs tests/test_large_collectives.py's exact checks (allgather, broadcast from every root,
alltoall with uneven splits, reducescatter, allreduce; 256 KiB +- 1 element and 4 MiB) three ways: with the
threshold forced to 1 byte, so every copy of every op is a process_vm_readv; with it off (0: the two-copy
rings); and forced low but with the probe refused (the PYHOROVOD_SHM_DIRECT_REFUSE test hook), which must fall
back on every rank. The raw core (_core.Communicator) shows which path was agreed: its direct_bytes is the
threshold when on, 0 when off or refused -- and a 9 MiB allgather and reducescatter through it are exact.
Left unset, the threshold follows the host's oversubscription (the union of the ranks' CPU masks), and the
engine's outputs start at their input's offset within a 64-byte line, with exact results at every offset.
"""
import os

import numpy as np
import pytest

from mp import connect_options_from_env, run_ranks
from test_large_collectives import _counts, _values, body

MODES = {
    "direct": {"PYHOROVOD_SHM_DIRECT_BYTES": "1"},
    "off": {"PYHOROVOD_SHM_DIRECT_BYTES": "0"},
    "refused": {"PYHOROVOD_SHM_DIRECT_BYTES": "1", "PYHOROVOD_SHM_DIRECT_REFUSE": "1"},
}


@pytest.mark.parametrize("size,mode", [(2, "direct"), (3, "direct"), (4, "direct"), (4, "off"), (2, "refused")])
def test_api_exact(size, mode):
    dtype = ("float32", "int32", "float64")[size % 3]
    counts = {dtype: _counts(dtype)}
    results = run_ranks(body, size, args=(counts, False), timeout=180, env=MODES[mode])
    want = len(counts[dtype]) * (5 + size)
    assert [r.value for r in results] == [want] * size
    refused = ["refused by the test hook" in r.stderr for r in results]
    assert refused == [mode == "refused"] * size


def body_core(want_direct):
    from pyhorovod import _core
    o = connect_options_from_env()
    o.shm_direct_bytes = int(os.environ["PYHOROVOD_SHM_DIRECT_BYTES"])
    o.shm_direct_refuse_probe = os.environ.get("PYHOROVOD_SHM_DIRECT_REFUSE") == "1"
    comm = _core.Communicator(o)
    assert comm.direct_bytes == want_direct, comm.direct_bytes
    size, rank = comm.size, comm.rank
    count = (9 << 20) // 4 + 3  # 9 MiB and 3 elements: blocks above a 1 MiB threshold, uneven
    x = _values(rank, count, "float32", 3)
    out = np.empty(count * size, np.float32)
    comm.allgatherv(x, out, [count * 4] * size, 60.0)
    assert np.array_equal(out, np.concatenate([_values(r, count, "float32", 3) for r in range(size)]))
    parts = [count // size + (1 if r < count % size else 0) for r in range(size)]
    shard = np.empty(parts[rank], np.float32)
    comm.reducescatter(x, shard, parts, _core.FLOAT32, _core.SUM, 60.0)
    total = sum(_values(r, count, "float32", 3) for r in range(size))
    start = sum(parts[:rank])
    assert np.array_equal(shard, total[start:start + parts[rank]])
    assert np.array_equal(x, _values(rank, count, "float32", 3)), "the input changed"
    comm.close()
    return want_direct


@pytest.mark.parametrize("mode,want", [("direct", 1 << 20), ("off", 0), ("refused", 0)])
def test_core_agreed_path(mode, want):
    env = dict(MODES[mode])
    if mode != "off":
        env["PYHOROVOD_SHM_DIRECT_BYTES"] = str(1 << 20)
    results = run_ranks(body_core, 3, args=(want,), timeout=120, env=env)
    assert [r.value for r in results] == [want] * 3


def body_auto(pin, explicit_on_rank0):
    """The thresholds agreed (pieces, broadcast) with PYHOROVOD_SHM_DIRECT_BYTES unset, after pinning:
    "same" puts every rank on one CPU, "own" each rank on a CPU of its own (as mpirun's binding to cores
    does)."""
    from pyhorovod import _core
    o = connect_options_from_env()
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[0]} if pin == "same" else {cpus[o.rank % len(cpus)]})
    if explicit_on_rank0 and o.rank == 0:
        o.shm_direct_bytes = explicit_on_rank0
    comm = _core.Communicator(o)
    got = [comm.direct_bytes, comm.broadcast_direct_bytes]
    comm.close()
    return got


@pytest.mark.parametrize("pin,explicit,want", [
    ("same", 0, [256 << 10, 1 << 20]),    # 2 ranks on 1 CPU: oversubscribed (a broadcast keeps 1 MiB)
    ("own", 0, [1 << 20, 1 << 20]),       # 2 ranks with a CPU each: the union of their masks counts 2
    ("same", 1 << 20, [1 << 20, 1 << 20]),  # one rank asks for 1 MiB explicitly: the largest wins
])
def test_threshold_follows_oversubscription(pin, explicit, want):
    if pin == "own" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs to give each rank its own")
    results = run_ranks(body_auto, 2, args=(pin, explicit), timeout=60)
    assert [r.value for r in results] == [want] * 2


def _at_phase(values, phase):
    """A copy of `values` whose first byte lies `phase` bytes into a 64-byte line."""
    raw = np.empty(values.nbytes + 64, np.uint8)
    start = (phase - raw.ctypes.data) % 64
    placed = raw[start:start + values.nbytes].view(values.dtype)
    placed[...] = values
    return placed


def body_phase(phases):
    import pyhorovod as hvd
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    count = (3 << 20) // 4 + 2  # 3 MiB per rank and 8 bytes: single copies at the default threshold
    for phase in phases:
        x = _at_phase(_values(rank, count, "float32", phase), phase)
        out = hvd.allgather(x, name=f"ag.phase.{phase}")
        assert np.array_equal(out, np.concatenate([_values(r, count, "float32", phase) for r in range(size)]))
        assert out.ctypes.data % 64 == phase, (phase, out.ctypes.data % 64)
        rows = count // size * size
        y = _at_phase(_values(rank, rows, "float32", phase + 1), phase)
        got = hvd.alltoall(y, name=f"a2a.phase.{phase}")
        block = rows // size
        want = np.concatenate([_values(r, rows, "float32", phase + 1)[rank * block:(rank + 1) * block]
                               for r in range(size)])
        assert np.array_equal(got, want) and got.ctypes.data % 64 == phase
        shard = hvd.reducescatter(x, op=hvd.Sum, name=f"rs.phase.{phase}")
        total = sum(_values(r, count, "float32", phase) for r in range(size))
        parts = [count // size + (1 if r < count % size else 0) for r in range(size)]
        assert np.array_equal(shard, total[sum(parts[:rank]):sum(parts[:rank + 1])])
    return len(phases)


def test_engine_outputs_start_where_the_input_does_within_a_line():
    # The kernel's copy runs at a fraction of its speed between buffers at different offsets within a
    # 32-byte block (transport/cross_memory.h), so the engine places an allgather's or alltoall's output at
    # its input's offset within a 64-byte line; results stay exact at every offset.
    phases = [16, 0, 40, 8, 4, 60]
    results = run_ranks(body_phase, 3, args=(phases,), timeout=120)
    assert [r.value for r in results] == [len(phases)] * 3
