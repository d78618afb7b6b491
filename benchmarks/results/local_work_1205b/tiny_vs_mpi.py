"""A 4 B blocking allreduce through pyhorovod's API against mpi4py in the same processes, batch by
batch (A B A B ...), so a change of the machine's state hits both alike: allreduce against Allreduce
into a separate buffer, allreduce_ against Allreduce(IN_PLACE), allreduce without a name against
Allreduce, and the asynchronous named path (allreduce_async then synchronize) against Allreduce. Prints
the median over rounds of rank 0's us per call and the median of the per-round ratios ours/mpi. (The
unnamed row was added after the first runs: paired_2ranks.txt and paired_4ranks.txt lack it.)

    mpirun --allow-run-as-root --oversubscribe -np N -x PYTHONPATH=<tree> python tiny_vs_mpi.py
"""
import statistics
import time

import numpy as np
from mpi4py import MPI

import pyhorovod as hvd

hvd.init()
comm = MPI.COMM_WORLD
ROUNDS, CALLS = 9, 2000
x, y = np.ones(1, np.float32), np.empty(1, np.float32)
pairs = {"allreduce": (lambda: hvd.allreduce(x, op=hvd.Sum, name="a"),
                       lambda: comm.Allreduce(x, y, op=MPI.SUM)),
         "allreduce_": (lambda: hvd.allreduce_(x, op=hvd.Sum, name="b"),
                        lambda: comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)),
         "unnamed": (lambda: hvd.allreduce(x, op=hvd.Sum),
                     lambda: comm.Allreduce(x, y, op=MPI.SUM)),
         "async+sync": (lambda: hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, name="c")),
                        lambda: comm.Allreduce(x, y, op=MPI.SUM))}


def timed(f):
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(CALLS):
        f()
    return (time.perf_counter() - t) / CALLS * 1e6


for op, (ours, mpi) in pairs.items():
    a, b = [], []
    for _ in range(ROUNDS):
        for f in (ours, mpi):
            for _ in range(200):
                f()
        a.append(timed(ours))
        b.append(timed(mpi))
    if hvd.rank() == 0:
        ratio = statistics.median(p / q for p, q in zip(a, b))
        print(f"{op:11s} n={hvd.size()} ours {statistics.median(a):6.2f} us  mpi {statistics.median(b):6.2f} us  "
              f"ours/mpi {ratio:5.2f}", flush=True)
hvd.shutdown()
