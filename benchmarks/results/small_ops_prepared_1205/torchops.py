"""4 B-scale blocking pyhorovod.torch collectives, µs per call on rank 0 (the paired before/after of
RESULTS.md). torch's intra-op threads are left at their default.

    python -m pyhorovod.run -np N python torchops.py
"""
import time

import torch

import pyhorovod.torch as hvd

hvd.init()
n = hvd.size()
x = torch.ones(1)
xs = torch.ones(n)
ops = {"allreduce": lambda: hvd.allreduce(x, op=hvd.Sum, name="a"),
       "allreduce_": lambda: hvd.allreduce_(x, op=hvd.Sum, name="a_"),
       "broadcast": lambda: hvd.broadcast(x, 0, name="b"),
       "allgather": lambda: hvd.allgather(x, name="g"),
       "alltoall": lambda: hvd.alltoall(xs, name="t"),
       "reducescatter": lambda: hvd.reducescatter(xs, op=hvd.Sum, name="r")}
for rnd in range(3):
    for k, f in ops.items():
        for _ in range(200):
            f()
        t = time.perf_counter()
        for _ in range(1000):
            f()
        dt = (time.perf_counter() - t) / 1000
        if hvd.rank() == 0 and rnd == 2:
            print(f"{k:14s} {dt * 1e6:7.1f} us")
hvd.shutdown()
