"""Open MPI's 2-rank alltoall into one receive buffer, and into two taken in turn, against the API's (which
returns a new array per call while the caller still holds the last one), in one job (mpirun -np 2).

    mpirun --allow-run-as-root -np 2 python mpi_alternating_outputs.py 4,8,16,64
"""
import statistics as st
import sys
import time

import numpy as np
import pyhorovod as hvd
from mpi4py import MPI


def main():
    hvd.init()
    comm = MPI.COMM_WORLD
    for mib in [int(s) for s in sys.argv[1].split(",")]:
        n = mib << 20
        x = np.arange(n // 4, dtype=np.float32)
        r1, r2, r3 = (np.ones_like(x) for _ in range(3))
        k = max(3, min(200, (256 << 20) // n))

        def same():
            for _ in range(k):
                comm.Alltoall(x, r1)

        def alt():
            for i in range(k):
                comm.Alltoall(x, r2 if i % 2 else r3)

        def api():
            for _ in range(k):
                out = hvd.alltoall(x)   # noqa: F841 (held until the next call replaces it, as a loop does)

        cands = {"mpi_same": same, "mpi_alt": alt, "api": api}
        t = {c: [] for c in cands}
        for _ in range(9):
            for c, f in cands.items():
                comm.Barrier()
                t0 = time.perf_counter()
                f()
                t[c].append(comm.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX))
        if hvd.rank() == 0:
            ratio = {f"{a}/{b}": st.median([u / v for u, v in zip(t[a], t[b])])
                     for a, b in (("mpi_alt", "mpi_same"), ("api", "mpi_same"), ("api", "mpi_alt"))}
            print(f"{mib} MiB: " + " ".join(f"{c} {st.median(v) * 1e6:.0f}" for c, v in t.items()) + " us | "
                  + " ".join(f"{k_} {v:.2f}" for k_, v in ratio.items()), flush=True)
    hvd.shutdown()


main()
