"""Paired in one job: the ring allreduce_ against reducescatter + allgather (both single copies) through
the API, and Open MPI's Allreduce; 2 ranks, 64 MiB. Per batch: the slowest rank's time per call."""
import statistics as st
import sys
import time

import numpy as np
import pyhorovod as hvd
from mpi4py import MPI

hvd.init()
comm = MPI.COMM_WORLD
n = int(float(sys.argv[1]) * (1 << 20)) // 4
x = np.ones(n, np.float32)
y = x.copy()
cands = {"ring": lambda: hvd.allreduce_(x, op=hvd.Average),
         "rs+ag": lambda: hvd.allgather(hvd.reducescatter(y, op=hvd.Average)),
         "mpi": lambda: comm.Allreduce(MPI.IN_PLACE, x)}
t = {c: [] for c in cands}
for rnd in range(int(sys.argv[2]) if len(sys.argv) > 2 else 15):
    for c, f in cands.items():
        f()
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(3):
            f()
        t[c].append(comm.allreduce((time.perf_counter() - t0) / 3, op=MPI.MAX))
        if c == "mpi":
            x[:] = 1
if hvd.rank() == 0:
    for i in range(len(t["ring"])):
        print(" ".join(f"{c} {t[c][i] * 1e3:6.1f}" for c in cands), "ms")
    print("median", " ".join(f"{c} {st.median(v) * 1e3:.1f}" for c, v in t.items()),
          "| ring/(rs+ag)", f"{st.median([a / b for a, b in zip(t['ring'], t['rs+ag'])]):.2f}")
hvd.shutdown()
