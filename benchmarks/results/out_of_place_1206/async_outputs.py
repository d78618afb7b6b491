"""The asynchronous numpy allreduce's output: from the engine's pool, or numpy's np.empty (as before), in
one job (mpirun -np N). The switch is the pool's floor in pyhorovod/_buffers.py, set per batch.

    mpirun --allow-run-as-root -np 2 python async_outputs.py 1,4,16,64
"""
import statistics as st
import sys
import time

import numpy as np
import pyhorovod as hvd
from mpi4py import MPI
from pyhorovod import _buffers


def main():
    hvd.init()
    comm = MPI.COMM_WORLD
    floor = _buffers._POOLED_BYTES
    for mib in [float(s) for s in sys.argv[1].split(",")]:
        x = np.ones(int(mib * (1 << 20)) // 4, dtype=np.float32)
        k = max(3, min(200, (256 << 20) // x.nbytes))

        def run():
            for _ in range(k):
                out = hvd.synchronize(hvd.allreduce_async(x, op=hvd.Average))   # noqa: F841

        cands = {"pooled": floor, "np.empty": 1 << 62}
        t = {c: [] for c in cands}
        for _ in range(9):
            for c, f in cands.items():
                _buffers._POOLED_BYTES = f
                comm.Barrier()
                t0 = time.perf_counter()
                run()
                t[c].append(comm.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX))
        _buffers._POOLED_BYTES = floor
        if hvd.rank() == 0:
            gain = st.median([b / a for a, b in zip(t["pooled"], t["np.empty"])])
            print(f"{mib:g} MiB np{hvd.size()}: " + " ".join(f"{c} {st.median(v) * 1e6:.0f}" for c, v in t.items())
                  + f" us | np.empty/pooled {gain:.2f}", flush=True)
    hvd.shutdown()


main()
