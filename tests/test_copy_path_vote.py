"""The negotiated copy path over real processes (csrc/engine/copy_path_vote.h): pieces between 64 KiB and
the single-copy threshold go as single copies while more than half the ranks vote for it. Each rank's
policy comes from PYHOROVOD_SHM_DIRECT_ADAPT (`wide` / `off` force its vote, `auto` measures), and the
engine's statistics line says how many of those calls ran as single copies and how many votes a rank
sent. Every result is checked exactly, including an alltoall whose pieces straddle the threshold, so a
pair of ranks that took different paths would show."""
import os
import re

import numpy as np
import pytest

from mp import run_ranks

COPY_STATS = re.compile(r"(\d+) of (\d+) calls below the single-copy threshold run as single copies, "
                        r"(\d+) copy-path votes")
PIECE = 128 << 10        # bytes one rank sends each other one: between 64 KiB and either threshold
CALLS = 24


def body_copy_path(wide_ranks, policy_elsewhere):
    rank = int(os.environ["PYHOROVOD_RANK"])
    os.environ["PYHOROVOD_SHM_DIRECT_ADAPT"] = "wide" if rank in wide_ranks else policy_elsewhere
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    rows = PIECE // 4 // 8                       # rows of 8 float32
    for call in range(CALLS):
        x = np.full((rows, 8), 100 * r + call, np.float32)
        out = hvd.allgather(x, name="ag")
        want = np.concatenate([np.full((rows, 8), 100 * q + call, np.float32) for q in range(n)])
        assert np.array_equal(out, want), ("allgather", call)
        # alltoall: to rank j, rows (j + 1) * rows / 2 -- pieces from 64 KiB up, below and above 128 KiB
        splits = [(j + 1) * rows // 2 for j in range(n)]
        y = np.concatenate([np.full((splits[j], 8), 1000 * r + 10 * j + call % 10, np.float32) for j in range(n)])
        out, received = hvd.alltoall(y, splits=splits, name="a2a")
        mine = (r + 1) * rows // 2
        want = np.concatenate([np.full((mine, 8), 1000 * q + 10 * r + call % 10, np.float32) for q in range(n)])
        assert np.array_equal(out, want) and received.tolist() == [mine] * n, ("alltoall", call)
        z = np.arange(n * rows * 8, dtype=np.float32).reshape(n * rows, 8) % 97 * (r + 1)
        out = hvd.reducescatter(z, op=hvd.Sum, name="rs")
        full = np.arange(n * rows * 8, dtype=np.float32).reshape(n * rows, 8) % 97 * (n * (n + 1) // 2)
        assert np.array_equal(out, full[r * rows:(r + 1) * rows]), ("reducescatter", call)
    hvd.shutdown()


def copy_stats(stderr):
    m = COPY_STATS.search(stderr)
    assert m, f"no copy-path statistics in:\n{stderr}"
    return tuple(map(int, m.groups()))


def run(size, wide_ranks, policy_elsewhere="off", extra_env=None):
    env = {"HOROVOD_LOG_LEVEL": "info", **(extra_env or {})}
    results = run_ranks(body_copy_path, size, timeout=90, env=env, args=(tuple(wide_ranks), policy_elsewhere))
    return [copy_stats(res.stderr) for res in results]


@pytest.mark.parametrize("size,wide_ranks,wide", [
    (2, [], False), (2, [1], False), (2, [0, 1], True),
    (4, [0, 3], False), (4, [1, 2, 3], True),
])
def test_more_than_half_of_the_votes_widen_single_copies(size, wide_ranks, wide):
    for single, timed, votes in run(size, wide_ranks):
        assert timed == 3 * CALLS, (single, timed)   # every call's pieces lie in the range the mode decides
        # A forced vote goes with the first round, before any collective runs.
        assert single == (timed if wide else 0), (single, timed, wide_ranks)
        assert votes <= 1


def test_measuring_ranks_explore_single_copies_and_stay_exact():
    # With `auto` everywhere, every rank times the ring first; single copies, never timed, are explored
    # after a few calls on every rank, so the mode turns wide at least once.
    for single, timed, votes in run(2, [], policy_elsewhere="auto"):
        assert timed == 3 * CALLS and single >= 1 and votes >= 1, (single, timed, votes)


def test_nothing_is_timed_where_single_copies_are_off():
    for single, timed, votes in run(2, [0, 1], extra_env={"PYHOROVOD_SHM_DIRECT_REFUSE": "1"}):
        assert (single, timed) == (0, 0), (single, timed, votes)
