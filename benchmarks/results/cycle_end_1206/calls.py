"""Back-to-back synchronous calls of one op and size; prints this rank's time per call (the engine's round
count comes from its statistics line at shutdown, with HOROVOD_LOG_LEVEL=info).

    python3 -m pyhorovod.run -np 2 python3 calls.py allreduce|alltoall KIB CALLS
"""
import sys
import time

import numpy as np

import pyhorovod as hvd

hvd.init()
op, kib, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x = np.ones((kib << 10) // 4, np.float32)
call = hvd.allreduce if op == "allreduce" else hvd.alltoall
for _ in range(20):
    call(x)
t = time.perf_counter()
for _ in range(calls):
    call(x)
print(f"rank {hvd.rank()}: {(time.perf_counter() - t) / calls * 1e6:.0f} us per call", file=sys.stderr)
hvd.shutdown()
