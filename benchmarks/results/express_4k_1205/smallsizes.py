"""Blocking numpy collectives at small sizes, µs per call on rank 0 (median of 5 rounds of 500 calls).

    PYTHONPATH=<tree> python -m pyhorovod.run -np N python smallsizes.py 4,256,1024,4096
"""
import statistics
import sys
import time

import numpy as np
import pyhorovod as hvd

hvd.init()
n, r = hvd.size(), hvd.rank()
res = {}
for nbytes in [int(s) for s in sys.argv[1].split(",")]:
    e = max(1, nbytes // 4)
    x = np.ones(e, np.float32)
    xa = np.ones(max(n, e // n * n), np.float32)
    ops = {"allreduce": lambda: hvd.allreduce(x, op=hvd.Sum, name=f"a{nbytes}"),
           "broadcast": lambda: hvd.broadcast(x, 0, name=f"b{nbytes}"),
           "allgather": lambda: hvd.allgather(np.ones(max(1, e // n), np.float32), name=f"g{nbytes}"),
           "alltoall": lambda: hvd.alltoall(xa, name=f"t{nbytes}"),
           "reducescatter": lambda: hvd.reducescatter(xa, op=hvd.Sum, name=f"r{nbytes}")}
    for k, f in ops.items():
        ts = []
        for rnd in range(5):
            for _ in range(100):
                f()
            t = time.perf_counter()
            for _ in range(500):
                f()
            ts.append((time.perf_counter() - t) / 500 * 1e6)
        res[(k, nbytes)] = statistics.median(ts)
if r == 0:
    for (k, b), v in sorted(res.items()):
        print(f"{k:14s} {b:6d} {v:7.2f}")
hvd.shutdown()
