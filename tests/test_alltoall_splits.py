"""Alltoall's splits through the response cache, over real processes: when the negotiation agreed that every
member splits its rows evenly, the ranks skip the exchange of split counts and work out what they receive
from the agreed first dimensions. A rank that switches to uneven splits (or back, or changes its first
dimension) while the request is cached must still get exact results and exact received splits. Each row
holds (sender, receiver, row) so a block in the wrong place or of the wrong length shows."""
import numpy as np
import pytest

from mp import run_ranks
from test_engine import stats

# Per call: (the rank with uneven splits or None, whether the others pass equal splits explicitly,
# the rank whose first dimension doubles or None).
SCHEDULE = [(None, False, None)] * 3 + [(-1, False, None)] * 2 + [(None, True, None)] * 2 + \
           [(None, False, 0)] + [(1, True, 1)] * 2 + [(None, False, None)] * 2


def rows_for(rank, size, call):
    uneven, explicit, grows = SCHEDULE[call]
    dim0 = size * (rank + 1) * (2 if grows is not None and grows % size == rank else 1)
    if uneven is not None and uneven % size == rank:
        splits = [0] * size
        splits[(rank + call) % size] = dim0 - (size - 1)   # one big block, one row to each other rank
        for j in range(size):
            if j != (rank + call) % size:
                splits[j] = 1
        return dim0, splits, True
    return dim0, [dim0 // size] * size, explicit


def block(sender, receiver, rows, width):
    # Row k of the block `sender` addresses to `receiver`: every element 10000 sender + 100 receiver + k.
    return np.repeat((10000 * sender + 100 * receiver + np.arange(rows, dtype=np.int64))[:, None], width, 1)


def body_splits_change_while_cached():
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    for call in range(len(SCHEDULE)):
        for name, width in (("big", 512), ("small", 1)):   # 4 KiB rows go the ordinary path; 8 B ones inline
            dim0, splits, pass_splits = rows_for(r, n, call)
            x = np.concatenate([block(r, j, splits[j], width) for j in range(n)])
            assert x.shape[0] == dim0
            if pass_splits:
                out, received = hvd.alltoall(x, splits=splits, name=name)
                received = received.tolist()
            else:
                out, received = hvd.alltoall(x, name=name), None
            theirs = [rows_for(s, n, call)[1][r] for s in range(n)]
            want = np.concatenate([block(s, r, theirs[s], width) for s in range(n)])
            assert out.shape == want.shape and np.array_equal(out, want), (call, name, out.shape, want.shape)
            assert received is None or received == theirs, (call, name, received, theirs)
    # nothing for rank 0: its output is empty and keeps the row shape; unnamed, so under the reusable name
    x = np.concatenate([block(r, j, 0 if j == 0 else 2, 3) for j in range(n)])
    out, received = hvd.alltoall(x, splits=[0] + [2] * (n - 1))
    if r == 0:
        assert out.shape == (0, 3) and out.dtype == np.int64 and received.tolist() == [0] * n, (out, received)
    else:
        assert np.array_equal(out, np.concatenate([block(s, r, 2, 3) for s in range(n)])), out
        assert received.dtype == np.int32 and received.tolist() == [2] * n, received
    hvd.shutdown()


@pytest.mark.parametrize("size", [2, 3, 4])
def test_alltoall_splits_change_while_the_request_is_cached(size):
    results = run_ranks(body_splits_change_while_cached, size, timeout=90, env={"HOROVOD_LOG_LEVEL": "info"})
    s = stats(results[0].stderr)
    # Most calls come from the cache: what the test is about.
    assert s["cached"] + s["inline"] >= len(SCHEDULE), s


def test_splits_in_every_form_give_the_same_checked_values():
    # A list or tuple of ints skips numpy's conversion; every other form goes through it. Both must give
    # the same plain ints and the same errors.
    from pyhorovod._collective_shapes import check_splits
    want = [1, 0, 3]
    for form in (want, tuple(want), np.array(want), [np.int64(v) for v in want], np.array([want]).T):
        got = check_splits(form, 4, 3)
        assert got == want and all(type(v) is int for v in got), (form, got)
    for form in ([5, -1], (5, -1), np.array([5, -1])):
        with pytest.raises(ValueError, match="non-negative"):
            check_splits(form, 4, 2)
    with pytest.raises(ValueError, match="integers"):
        check_splits([1.0, 3], 4, 2)
