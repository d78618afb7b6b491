"""The local work of a 4 B blocking allreduce with and without a name, in a one-rank job (no exchange):
best of 5 x 10,000 calls after 2,000 warm-up calls, three rounds, the last printed.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=<tree> python unnamed.py
"""
import time

import numpy as np

import pyhorovod as hvd

hvd.init()
x = np.ones(1, np.float32)
calls = {"named allreduce_": lambda: hvd.allreduce_(x, op=hvd.Sum, name="n"),
         "unnamed allreduce_": lambda: hvd.allreduce_(x, op=hvd.Sum),
         "named allreduce": lambda: hvd.allreduce(x, op=hvd.Sum, name="m"),
         "unnamed allreduce": lambda: hvd.allreduce(x, op=hvd.Sum)}
for rnd in range(3):
    for label, f in calls.items():
        for _ in range(2000):
            f()
        best = 1e9
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(10000):
                f()
            best = min(best, (time.perf_counter() - t0) / 10000)
        if rnd == 2:
            print(f"{label:20s} {best * 1e9:6.0f} ns")
hvd.shutdown()
