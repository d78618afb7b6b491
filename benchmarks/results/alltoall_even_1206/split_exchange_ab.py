"""What the exchange of alltoall split counts costs, paired inside one set of processes.

    mpirun -np 4 --oversubscribe python3 split_exchange_ab.py 1K,4K,16K,64K

Candidates take turns batch by batch (rounds), as in benchmarks/perf_interleave.py:
  even    hvd.alltoall without splits (a prepared call: pyhorovod/_sync_calls.py): the negotiation agrees
          that every rank splits evenly, so the engine skips the exchange of split counts;
  splits  the engine's run_sync (no Python layer) with equal splits given: no exchange either;
  uneven  the same with splits that move one row of each rank's block for its right neighbour to its
          left one: every rank still receives the same number of bytes, but the splits are uneven, so the
          engine exchanges the counts first (uneven over splits: what the exchange costs);
  mpi     mpi4py's Alltoall of the even split.
Sizes are one rank's input. Prints, per size, the median over rounds of the slowest rank's time per call and
each candidate's time over that of `even`, and checks every output exactly.
"""
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import pyhorovod as hvd
from pyhorovod import _core, basics
from pyhorovod._buffers import dtype_code


def sizes_from(text):
    units = {"K": 1 << 10, "M": 1 << 20}
    return [int(t[:-1]) * units[t[-1]] if t[-1] in units else int(t) for t in text.split(",")]


def splits_of(rank, n, per, uneven):
    s = [per] * n
    if uneven:
        s[(rank + 1) % n] -= 1
        s[(rank - 1) % n] += 1
    return s


def main():
    hvd.init()
    comm = MPI.COMM_WORLD
    r, n = hvd.rank(), hvd.size()
    rounds = 7
    for nbytes in sizes_from(sys.argv[1]):
        per = nbytes // 4 // n   # float32 rows per destination
        x = (np.arange(per * n, dtype=np.float32) + 100000 * r)
        recv = np.empty_like(x)
        want = {u: np.concatenate([x[:0]] + [
            (np.arange(per * n, dtype=np.float32) + 100000 * s)[
                sum(splits_of(s, n, per, u)[:r]):sum(splits_of(s, n, per, u)[:r + 1])] for s in range(n)])
            for u in (False, True)}
        engine, code = basics.engine(), dtype_code(x, None, "alltoall")

        def engine_call(name, splits):
            res = engine.run_sync(_core.ALLTOALL, name, code, x.shape, x, None, 0, 1.0, 1.0, 0, 0, 60.0, splits)
            return np.asarray(res.output).view(np.float32)

        calls = {
            "even": lambda: hvd.alltoall(x, name="ab.even"),
            "splits": lambda: engine_call("ab.splits", [per] * n),
            "uneven": lambda: engine_call("ab.uneven", splits_of(r, n, per, True)),
            "mpi": lambda: comm.Alltoall(x, recv) or recv,
        }
        for name, call in calls.items():
            got = call()
            assert np.array_equal(got, want[name == "uneven"]), (r, name, nbytes)
        iters = max(50, min(2000, (64 << 20) // max(nbytes * n, 1)))
        times = {c: [] for c in calls}
        for rnd in range(rounds):
            order = list(calls)[rnd % len(calls):] + list(calls)[:rnd % len(calls)]
            for c in order:
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    calls[c]()
                dt = comm.allreduce((time.perf_counter() - t0) / iters, op=MPI.MAX)
                times[c].append(dt)
        if r == 0:
            ratios = {c: statistics.median(a / b for a, b in zip(times[c], times["even"])) for c in calls}
            print(f"{nbytes:>7} B  " + "  ".join(
                f"{c} {statistics.median(times[c]) * 1e6:6.1f} us ({ratios[c]:.2f})" for c in calls), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
