"""Streaming stores for a collective's own block, before and after, in one job (mpirun -np N).

Run it on the tree with ab_switch.diff applied (a temporary switch: PHV_AB_STREAM_BYTES=0 makes
copy_streaming() a memmove, the copy before this change). Candidates take turns batch by batch in the
same processes: "stream" (the switch unset: the tree as committed), "plain" (the switch set), "mpi"
(mpi4py into a preallocated buffer: Alltoall, Allgather; Bcast of a copy for the out-of-place
broadcast). Each batch's time is the slowest rank's; medians over batches and of the paired per-batch
ratios.

    mpirun --allow-run-as-root --oversubscribe -np 2 python ab_streaming.py alltoall 1,4,16,64,256
    mpirun --allow-run-as-root --oversubscribe -np 2 python ab_streaming.py alltoall 1,4,16 read

With "read" as the third argument every call's output is also summed (np.sum) right after the call, as a
consumer of the result would: streamed bytes are not in the cache then, plain ones partly are.
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
read = len(sys.argv) > 3 and sys.argv[3] == "read"
p, r = hvd.size(), hvd.rank()
for mib in [float(s) for s in sys.argv[2].split(",")]:
    n = int(mib * (1 << 20)) // 4 // p * p   # alltoall's input, allgather's output, the broadcast buffer
    if op == "alltoall":
        x = (np.arange(n) % 7 + r).astype(np.float32)
        recv = np.empty_like(x)
        ours, mpi = (lambda: hvd.alltoall(x)), (lambda: comm.Alltoall(x, recv))
    elif op == "allgather":
        x = (np.arange(n // p) % 7 + r).astype(np.float32)
        recv = np.empty(n, np.float32)
        ours, mpi = (lambda: hvd.allgather(x)), (lambda: comm.Allgather(x, recv))
    else:
        x = (np.arange(n) % 7).astype(np.float32)
        recv = np.empty_like(x)
        ours = lambda: hvd.broadcast(x, 0)  # noqa: E731

        def mpi():
            if r == 0:
                recv[:] = x
            comm.Bcast(recv, 0)
    if read:
        ours = (lambda f: lambda: float(np.sum(f())))(ours)
        mpi = (lambda f: lambda: (f(), float(np.sum(recv))))(mpi)
    want = None
    k = max(3, min(200, (256 << 20) // (4 * n)))
    cands = {"stream": (None, ours), "plain": ("0", ours), "mpi": (None, mpi)}
    t = {c: [] for c in cands}
    for _ in range(9):
        for c, (switch, f) in cands.items():
            if switch is None:
                os.environ.pop("PHV_AB_STREAM_BYTES", None)
            else:
                os.environ["PHV_AB_STREAM_BYTES"] = switch
            out = f()
            if c != "mpi" and not read:   # both trees give the same bytes
                if want is None:
                    want = out.copy()
                assert np.array_equal(out, want), (c, mib)
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                out = f()
            t[c].append(comm.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX))
    os.environ.pop("PHV_AB_STREAM_BYTES", None)
    if r == 0:
        med = " ".join(f"{c} {st.median(v) * 1e6:.0f}" for c, v in t.items())
        ratio = " ".join(f"{c} {st.median([m / a for m, a in zip(t['mpi'], t[c])]):.2f}" for c in cands if c != "mpi")
        gain = st.median([a / b for a, b in zip(t["plain"], t["stream"])])
        what = op + (" read" if read else "")
        print(f"{what} {mib:g} MiB np{p}: us {med} | mpi/x {ratio} | plain/stream {gain:.2f}", flush=True)
hvd.shutdown()
