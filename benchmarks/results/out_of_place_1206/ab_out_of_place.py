"""Out-of-place allreduce and broadcast through the numpy API, before and after, in one job (mpirun -np N).

Candidates take turns batch by batch in the same processes: "new" (the tree of 2026-12-06 evening),
the old way ("copy": the tree with PHV_AB_COPY set, where the executor copies the input into the output
first, ab_switches.diff; or, with PHV_AB_SPLIT as the third argument, "split": a broadcast root that writes
1/p of each reader's buffer at every size, ab_broadcast_split.txt), "inplace" (allreduce_/broadcast_),
"mpi" (mpi4py: Allreduce into a preallocated buffer, Bcast in place). Each batch's time is the slowest
rank's; medians over batches and of the paired per-batch ratios.

    mpirun --allow-run-as-root --oversubscribe -np 2 python ab_out_of_place.py allreduce 0.25,1,4,16,64
    mpirun --allow-run-as-root --oversubscribe -np 2 python ab_out_of_place.py broadcast 2,4,8,16,64 PHV_AB_SPLIT
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
switch = sys.argv[3] if len(sys.argv) > 3 else "PHV_AB_COPY"
old = {"PHV_AB_COPY": "copy", "PHV_AB_SPLIT": "split"}[switch]
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
    cands = {"new": (False, oop), old: (True, oop), "inplace": (False, inplace), "mpi": (False, mpi)}
    t = {c: [] for c in cands}
    for _ in range(9):
        for c, (copy, f) in cands.items():
            if copy:
                os.environ[switch] = "1"
            else:
                os.environ.pop(switch, None)
            f()
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                out = f()
            t[c].append(comm.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX))
    os.environ.pop(switch, None)
    if hvd.rank() == 0:
        med = " ".join(f"{c} {st.median(v) * 1e6:.0f}" for c, v in t.items())
        ratio = " ".join(f"{c} {st.median([m / a for m, a in zip(t['mpi'], t[c])]):.2f}" for c in cands if c != "mpi")
        gain = st.median([a / b for a, b in zip(t[old], t["new"])])
        print(f"{op} {mib:g} MiB np{hvd.size()}: us {med} | mpi/x {ratio} | {old}/new {gain:.2f}", flush=True)
hvd.shutdown()
