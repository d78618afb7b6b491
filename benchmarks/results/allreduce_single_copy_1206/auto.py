"""One launch: `calls` in-place SUM allreduces of `MiB` float32 through the API, with the policy the
launcher gave PYHOROVOD_ALLREDUCE_SINGLE_COPY. Prints rank 0's median time per call over the last half and
the mean over all (the second includes the vote's exploring). Usage: python3 auto.py MiB calls"""
import statistics as st
import sys
import time

import numpy as np
import pyhorovod as hvd

hvd.init()
n = int(float(sys.argv[1]) * (1 << 20)) // 4
calls = int(sys.argv[2])
x = np.ones(n, np.float32)
times = []
for _ in range(calls):
    t0 = time.perf_counter()
    hvd.allreduce_(x, op=hvd.Sum)
    times.append(time.perf_counter() - t0)
    x[:1] = 1
if hvd.rank() == 0:
    print(f"median_last_half_ms {st.median(times[calls // 2:]) * 1e3:.2f} mean_all_ms {st.mean(times) * 1e3:.2f}",
          flush=True)
hvd.shutdown()
