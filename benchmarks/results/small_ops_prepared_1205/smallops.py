"""4 B-scale blocking numpy collectives, µs per call on rank 0 (the paired before/after of RESULTS.md).

    python -m pyhorovod.run -np N python smallops.py
"""
import time

import numpy as np


def report(ops, rank):
    """Three rounds over `ops` (name -> call): 200 warm-up calls, then 1,000 timed; prints the last round."""
    for rnd in range(3):
        for k, f in ops.items():
            for _ in range(200):
                f()
            t = time.perf_counter()
            for _ in range(1000):
                f()
            dt = (time.perf_counter() - t) / 1000
            if rank == 0 and rnd == 2:
                print(f"{k:14s} {dt * 1e6:7.1f} us")


if __name__ == "__main__":
    import pyhorovod as hvd
    hvd.init()
    x = np.ones(1, np.float32)
    report({"allreduce": lambda: hvd.allreduce(x, op=hvd.Sum, name="a"),
            "broadcast": lambda: hvd.broadcast(x, 0, name="b"),
            "allgather": lambda: hvd.allgather(x, name="g"),
            "alltoall": lambda: hvd.alltoall(np.ones(hvd.size(), np.float32), name="t"),
            "reducescatter": lambda: hvd.reducescatter(np.ones(hvd.size(), np.float32), op=hvd.Sum, name="r")},
           hvd.rank())
    hvd.shutdown()
