"""The allreduce vote over time: in-place SUM allreduces of `MiB`, `calls` of them, policy auto. Every 100
calls rank 0 prints the time since the start and the median ms per call of those 100; with
HOROVOD_LOG_LEVEL=debug the engine logs each vote with its figures (ns per byte of each algorithm) when it
sends it, so the vote can be read against the host's state. Usage: pyhorovod run -np 2 python3
vote_trace.py MiB calls"""
import statistics as st
import sys
import time

import numpy as np
import pyhorovod as hvd

hvd.init()
x = np.ones(int(float(sys.argv[1]) * (1 << 20)) // 4, np.float32)
start = time.monotonic()
window = []
for call in range(1, int(sys.argv[2]) + 1):
    t0 = time.perf_counter()
    hvd.allreduce_(x, op=hvd.Sum)
    window.append(time.perf_counter() - t0)
    x[:1] = 1
    if call % 100 == 0 and hvd.rank() == 0:
        print(f"t={time.monotonic() - start:6.1f}s calls {call:6d} median {st.median(window) * 1e3:6.2f} ms",
              flush=True)
        window = []
hvd.shutdown()
