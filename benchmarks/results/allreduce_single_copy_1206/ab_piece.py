"""Paired in one job: the single-copy allreduce with pieces of 256 KiB, 1 MiB and 4 MiB (a temporary switch,
PHV_AB_PIECE, read on every call). Per batch: the slowest rank's mean time per call."""
import os
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
reps = max(3, min(20, (64 << 20) // (4 * n)))
os.environ["PHV_AB_SINGLE"] = "1"
t = {k: [] for k in ("262144", "1048576", "4194304")}
for rnd in range(9):
    for k in t:
        os.environ["PHV_AB_PIECE"] = k
        x[:] = 1
        hvd.allreduce_(x, op=hvd.Sum)
        assert np.all(x == comm.size)
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            hvd.allreduce_(x, op=hvd.Sum)
        t[k].append(comm.allreduce((time.perf_counter() - t0) / reps, op=MPI.MAX))
if hvd.rank() == 0:
    print(f"np {comm.size} {sys.argv[1]} MiB, median ms:",
          " ".join(f"{k} {st.median(v) * 1e3:.2f}" for k, v in t.items()),
          "| 1M/256K", f"{st.median([a / b for a, b in zip(t['1048576'], t['262144'])]):.2f}",
          "| 1M/4M", f"{st.median([a / b for a, b in zip(t['1048576'], t['4194304'])]):.2f}", flush=True)
hvd.shutdown()
