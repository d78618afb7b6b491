"""The poll before sleeping in the single-copy collectives' final wait, in one job (mpirun -np N).

Candidates take turns batch by batch in the same processes: "default" (PHV_AB_NOSPIN: the transport's
own 50 us poll, as before), "targeted" (the tree: poll for as long as this rank's own copies took, at
most 10 ms), "global" (every wait polls 5 ms: PHV_AB_SPIN=5000, for comparison), "mpi" (mpi4py). Switches:
ab_switches.diff. Times: the slowest rank's per batch; medians of times and of paired per-batch ratios.

    mpirun --allow-run-as-root --oversubscribe -np 2 python ab_done_spin.py alltoall 1,4,16,64 7
"""
import os
import statistics as st
import sys
import time

import numpy as np
import pyhorovod as hvd
from mpi4py import MPI

VARIANTS = {"default": {"PHV_AB_NOSPIN": "1"}, "targeted": {}, "global": {"PHV_AB_SPIN": "5000", "PHV_AB_NOSPIN": "1"}}


def setenv(variant):
    for k in ("PHV_AB_NOSPIN", "PHV_AB_SPIN"):
        os.environ.pop(k, None)
    os.environ.update(VARIANTS.get(variant, {}))


def calls(op, x, recv, comm):
    api = {"alltoall": lambda: hvd.alltoall(x), "allgather": lambda: hvd.allgather(x),
           "broadcast": lambda: hvd.broadcast(x, 0), "reducescatter": lambda: hvd.reducescatter(x, op=hvd.Sum)}
    mpi = {"alltoall": lambda: comm.Alltoall(x, recv), "allgather": lambda: comm.Allgather(x, recv),
           "broadcast": lambda: comm.Bcast(x, 0), "reducescatter": lambda: comm.Reduce_scatter_block(x, recv)}
    return api[op], mpi[op]


def main():
    hvd.init()
    comm = MPI.COMM_WORLD
    op, sizes, batches = sys.argv[1], [int(s) << 20 for s in sys.argv[2].split(",")], int(sys.argv[3])
    p = hvd.size()
    for n in sizes:
        n -= n % (4 * p)
        x = np.arange(n // 4, dtype=np.float32)
        out_len = n // 4 * (p if op == "allgather" else 1) // (p if op == "reducescatter" else 1)
        recv = np.empty(out_len, dtype=np.float32)
        k = max(3, min(200, (256 << 20) // n))
        api, mpi = calls(op, x, recv, comm)
        cands = {v: api for v in VARIANTS}
        cands["mpi"] = mpi
        t = {c: [] for c in cands}
        for _ in range(batches):
            for c, f in cands.items():
                setenv(c)
                f()
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(k):
                    f()
                t[c].append(comm.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX))
        setenv("default")
        if hvd.rank() == 0:
            line = f"{op} {n >> 20:4d} MiB np{p}: " + " ".join(f"{c} {st.median(t[c]) * 1e6:7.0f}" for c in cands)
            line += " | mpi/x: " + " ".join(
                f"{c} {st.median([m / a for m, a in zip(t['mpi'], t[c])]):.2f}" for c in VARIANTS)
            line += " | x/default: " + " ".join(
                f"{c} {st.median([a / d for a, d in zip(t[c], t['default'])]):.2f}" for c in ("targeted", "global"))
            print(line, flush=True)
    hvd.shutdown()


main()
