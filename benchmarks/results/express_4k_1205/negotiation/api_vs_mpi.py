"""Blocking numpy collectives through pyhorovod's API against mpi4py in the same processes, batch by batch
(A B A B ...), so a change of the machine's state hits both alike. Prints, per op and size, the median over
rounds of rank 0's µs per call, and the median of the per-round ratios ours/mpi.

    mpirun --allow-run-as-root --oversubscribe -np N -x PYTHONPATH=<tree> python api_vs_mpi.py 16384,262144
"""
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import pyhorovod as hvd

hvd.init()
comm = MPI.COMM_WORLD
n, r = hvd.size(), hvd.rank()
assert comm.Get_size() == n
ROUNDS, CALLS = 7, 200


def timed(f, calls):
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(calls):
        f()
    return (time.perf_counter() - t) / calls * 1e6


for nbytes in [int(s) for s in sys.argv[1].split(",")]:
    e = max(n, nbytes // 4 // n * n)
    x = np.ones(e, np.float32)
    part = np.ones(e // n, np.float32)
    out_full, out_part = np.empty(e, np.float32), np.empty(e // n, np.float32)
    ours = {"allreduce": lambda: hvd.allreduce(x, op=hvd.Sum, name="a"),
            "allgather": lambda: hvd.allgather(part, name="g"),
            "broadcast": lambda: hvd.broadcast(x, 0, name="b"),
            "alltoall": lambda: hvd.alltoall(x, name="t"),
            "reducescatter": lambda: hvd.reducescatter(x, op=hvd.Sum, name="r")}
    mpi = {"allreduce": lambda: comm.Allreduce(x, out_full, op=MPI.SUM),
           "allgather": lambda: comm.Allgather(part, out_full),
           "broadcast": lambda: comm.Bcast(x, root=0),
           "alltoall": lambda: comm.Alltoall(x, out_full),
           "reducescatter": lambda: comm.Reduce_scatter_block(x, out_part, op=MPI.SUM)}
    calls = max(20, min(CALLS, int(2e8 / max(nbytes, 1) / 10)))
    for op in ours:
        a, b = [], []
        for _ in range(ROUNDS):
            for f in (ours[op], mpi[op]):
                for _ in range(20):
                    f()
            a.append(timed(ours[op], calls))
            b.append(timed(mpi[op], calls))
        if r == 0:
            ratio = statistics.median(x / y for x, y in zip(a, b))
            print(f"{op:14s} {nbytes:9d} ours {statistics.median(a):9.1f} mpi {statistics.median(b):9.1f} "
                  f"ours/mpi {ratio:6.2f}", flush=True)
hvd.shutdown()
