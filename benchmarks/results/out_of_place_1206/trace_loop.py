"""A loop of blocking 2-rank alltoalls through the numpy API, for alltoall_trace.diff's per-call phases.

    PHV_A2A_TRACE=/tmp/tr mpirun --allow-run-as-root -x PHV_A2A_TRACE -np 2 python trace_loop.py 16 300
    python trace_phases.py /tmp/tr
"""
import sys
import time

import numpy as np
import pyhorovod as hvd

hvd.init()
n, k = int(sys.argv[1]) << 20, int(sys.argv[2])
x = np.arange(n // 4, dtype=np.float32)
for _ in range(5):
    out = hvd.alltoall(x)
t = time.perf_counter()
for _ in range(k):
    out = hvd.alltoall(x)
print(hvd.rank(), f"{(time.perf_counter() - t) / k * 1e6:.0f} us per call", flush=True)
hvd.shutdown()
