"""Out-of-place broadcast: a root that writes no share of the readers' buffers (it copies the whole buffer
into its own output) against the in-place split (it writes 1/p of each), in one job (mpirun -np N).

Candidates take turns batch by batch in the same processes: "new" (the tree: no share from
kRootCopiesAloneBytes up), "split" (PHV_AB_SPLIT set: the 1/p split at every size, as before; switch in
ab_broadcast_split.txt), "inplace" (broadcast_), "mpi" (mpi4py's Bcast, in place).

    mpirun --allow-run-as-root --oversubscribe -np 2 python ab_broadcast_split.py broadcast 2,4,8,16,64
"""
import os
import statistics as st
import sys
import time

import numpy as np
import pyhorovod as hvd
from mpi4py import MPI

hvd.init()
comm = MPI.COMM_WORLD
op = sys.argv[1]
for mib in [float(s) for s in sys.argv[2].split(",")]:
    n = int(mib * (1 << 20)) // 4
    x = np.ones(n, dtype=np.float32)
    y, recv = x.copy(), np.empty_like(x)
    k = max(3, min(200, (256 << 20) // (4 * n)))
    if op == "allreduce":   # Average keeps the in-place candidate's values at 1
        oop, inplace, mpi = (lambda: hvd.allreduce(x, op=hvd.Average), lambda: hvd.allreduce_(y, op=hvd.Average),
                             lambda: comm.Allreduce(x, recv))
    else:
        oop, inplace, mpi = lambda: hvd.broadcast(x, 0), lambda: hvd.broadcast_(y, 0), lambda: comm.Bcast(x, 0)
    cands = {"new": (False, oop), "split": (True, oop), "inplace": (False, inplace), "mpi": (False, mpi)}
    t = {c: [] for c in cands}
    for _ in range(9):
        for c, (copy, f) in cands.items():
            if copy:
                os.environ["PHV_AB_SPLIT"] = "1"
            else:
                os.environ.pop("PHV_AB_SPLIT", None)
            f()
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                out = f()
            t[c].append(comm.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX))
    os.environ.pop("PHV_AB_SPLIT", None)
    if hvd.rank() == 0:
        med = " ".join(f"{c} {st.median(v) * 1e6:.0f}" for c, v in t.items())
        ratio = " ".join(f"{c} {st.median([m / a for m, a in zip(t['mpi'], t[c])]):.2f}" for c in cands if c != "mpi")
        gain = st.median([a / b for a, b in zip(t["split"], t["new"])])
        print(f"{op} {mib:g} MiB np{hvd.size()}: us {med} | mpi/x {ratio} | split/new {gain:.2f}", flush=True)
hvd.shutdown()
