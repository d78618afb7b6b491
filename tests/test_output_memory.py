"""Where the new outputs of allreduce, broadcast and reducescatter (not in place) live.

From _core.POOLED_OUTPUT_BYTES up they come from the engine's output pool (reused memory, placed like
the input within its 64-byte line), through the prepared synchronous call, the full synchronous path and
the asynchronous one alike. Checked at 2 ranks with exact values: an output kept alive is never reused
under a later call, one released is (the same address), the input is left as it was, and smaller outputs
stay plain numpy arrays.
"""
import numpy as np

from mp import run_ranks
from test_direct_collectives import _at_phase


def _values(rank, count, seed):
    return ((np.arange(count, dtype=np.int64) * (rank + 3) + seed) % 53).astype(np.float32)


def body(count, phase):
    import pyhorovod as hvd
    from pyhorovod import _core
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    pooled = count * 4 >= _core.POOLED_OUTPUT_BYTES
    x = _at_phase(_values(rank, count, 1), phase)
    total = sum(_values(r, count, 1) for r in range(size))
    parts = [count // size + (1 if r < count % size else 0) for r in range(size)]
    calls = {
        "allreduce": (lambda: hvd.allreduce(x, op=hvd.Sum), total),
        "allreduce named": (lambda: hvd.allreduce(x, op=hvd.Sum, name="ar.out"), total),
        "allreduce async": (lambda: hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum)), total),
        "broadcast": (lambda: hvd.broadcast(x, 1), _values(1, count, 1)),
        "broadcast async": (lambda: hvd.synchronize(hvd.broadcast_async(x, 0)), _values(0, count, 1)),
        "reducescatter": (lambda: hvd.reducescatter(x, op=hvd.Sum),
                          total[sum(parts[:rank]):sum(parts[:rank + 1])]),
    }
    checked = 0
    for what, (call, want) in calls.items():
        first = call()   # the full path, then (synchronous calls) the prepared one
        kept = [call() for _ in range(3)]
        for out in [first] + kept:
            assert np.array_equal(out, want), what
            assert out.flags.c_contiguous and out.flags.writeable and out.dtype == np.float32, what
            assert not np.shares_memory(out, x), what
        del out   # (the loop's name would keep the last output alive)
        assert np.array_equal(x, _values(rank, count, 1)), f"{what}: the input changed"
        addresses = [o.ctypes.data for o in [first] + kept]
        assert len(set(addresses)) == len(addresses), f"{what}: an output alive was handed out again"
        if pooled:
            assert all(a % 64 == phase % 64 for a in addresses if want.nbytes >= _core.POOLED_OUTPUT_BYTES), \
                (what, [a % 64 for a in addresses], phase)
            if want.nbytes >= _core.POOLED_OUTPUT_BYTES:
                last = kept.pop()
                address = last.ctypes.data
                del last
                again = call()
                assert again.ctypes.data == address, f"{what}: the released output was not reused"
                assert np.array_equal(again, want), what
                kept.append(again)
        else:
            assert all(o.base is None for o in [first] + kept), f"{what}: a small output is a plain array"
        first[...] = -1   # writing into one output leaves the others
        assert all(np.array_equal(o, want) for o in kept), what
        checked += 1
    hvd.shutdown()
    return checked


def test_large_outputs_come_from_the_pool_placed_like_the_input():
    count = (4 << 20) // 4 + 3   # 4 MiB and 12 bytes (a reducescatter block stays above the pool's floor)
    results = run_ranks(body, 2, args=(count, 24), timeout=120)
    assert [r.value for r in results] == [6, 6]


def test_small_outputs_are_plain_arrays():
    results = run_ranks(body, 2, args=(1000, 8), timeout=120)
    assert [r.value for r in results] == [6, 6]
