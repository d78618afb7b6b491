"""Paired in one job: the ring allreduce_ against the single-copy one, and Open MPI's Allreduce. The
algorithm is switched per batch by a temporary switch in use_direct_allreduce (ab_switch.diff: the
variable PHV_AB_SINGLE, read on every call, set here on every rank between batches). Per batch: the
slowest rank's mean time per call. Usage: mpirun -np N python3 ab.py MiB [batches]"""
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


def ours(single, pipe="0"):
    def call():
        os.environ["PHV_AB_SINGLE"] = single
        os.environ["PHV_AB_PIPE"] = pipe
        hvd.allreduce_(x, op=hvd.Sum)
    return call


cands = {"ring": ours("0"), "single": ours("1"), "mpi": lambda: comm.Allreduce(MPI.IN_PLACE, x)}
if os.environ.get("AB_PIPE"):
    cands["pipe"] = ours("1", "1")
t = {c: [] for c in cands}
for rnd in range(int(sys.argv[2]) if len(sys.argv) > 2 else 11):
    for c, f in cands.items():
        x[:] = 1
        f()
        assert np.all(x == comm.size), (c, x[:4])
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        t[c].append(comm.allreduce((time.perf_counter() - t0) / reps, op=MPI.MAX))
if hvd.rank() == 0:
    med = {c: st.median(v) for c, v in t.items()}
    print(f"np {comm.size} {sys.argv[1]} MiB, median ms:", " ".join(f"{c} {v * 1e3:.2f}" for c, v in med.items()),
          "| ring/single", f"{st.median([a / b for a, b in zip(t['ring'], t['single'])]):.2f}",
          "| mpi/single", f"{st.median([a / b for a, b in zip(t['mpi'], t['single'])]):.2f}",
          "| mpi/ring", f"{st.median([a / b for a, b in zip(t['mpi'], t['ring'])]):.2f}",
          *(["| single/pipe", f"{st.median([a / b for a, b in zip(t['single'], t['pipe'])]):.2f}"]
            if "pipe" in t else []), flush=True)
hvd.shutdown()
