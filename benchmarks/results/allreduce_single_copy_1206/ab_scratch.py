"""Paired in one job: the single-copy allreduce (or reducescatter) with its scratch kept by the thread
("kept") against a fresh zeroed scratch per call ("fresh", the first version; a temporary switch
PHV_AB_FRESH, read on every call: ab_switch.diff). Per batch: the slowest rank's mean time per call.
Usage: mpirun -np N python3 ab_scratch.py MiB [allreduce|reducescatter]"""
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
if sys.argv[2:] == ["reducescatter"]:
    def call():
        return hvd.reducescatter(x, op=hvd.Sum)
else:
    def call():
        x[:] = 1
        hvd.allreduce_(x, op=hvd.Sum)
        return x
t = {"fresh": [], "kept": []}
for rnd in range(11):
    for k in t:
        os.environ["PHV_AB_FRESH"] = "1" if k == "fresh" else "0"
        assert np.all(call() == comm.size)
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        t[k].append(comm.allreduce((time.perf_counter() - t0) / reps, op=MPI.MAX))
if hvd.rank() == 0:
    print(f"np {comm.size} {sys.argv[1]} MiB, median ms:",
          " ".join(f"{k} {st.median(v) * 1e3:.3f}" for k, v in t.items()),
          "| fresh/kept", f"{st.median([a / b for a, b in zip(t['fresh'], t['kept'])]):.3f}", flush=True)
hvd.shutdown()
