"""The local work of a 4 B blocking allreduce: a one-rank job (no exchange at all), pyhorovod against
mpi4py, and pyhorovod.torch against the numpy API. Best of 5 x 5,000 calls after 2,000 warm-up calls,
three rounds, the last printed.

    OPENBLAS_NUM_THREADS=1 python size1.py
"""
import time

import numpy as np
import torch
from mpi4py import MPI

import pyhorovod as hvd
import pyhorovod.torch as ht

hvd.init()
a, b, t = np.ones(1, np.float32), np.empty(1, np.float32), torch.ones(1)
c = MPI.COMM_WORLD
calls = {"pyhorovod allreduce_": lambda: hvd.allreduce_(a, op=hvd.Sum, name="x"),
         "pyhorovod allreduce": lambda: hvd.allreduce(a, op=hvd.Sum, name="y"),
         "pyhorovod.torch allreduce_": lambda: ht.allreduce_(t, op=ht.Sum, name="tx"),
         "pyhorovod.torch allreduce": lambda: ht.allreduce(t, op=ht.Sum, name="ty"),
         "mpi4py Allreduce(IN_PLACE)": lambda: c.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM),
         "mpi4py Allreduce": lambda: c.Allreduce(a, b, op=MPI.SUM)}
for rnd in range(3):
    for k, f in calls.items():
        for _ in range(2000):
            f()
        best = 1e9
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(5000):
                f()
            best = min(best, (time.perf_counter() - t0) / 5000)
        if rnd == 2:
            print(f"{k:28s} {best * 1e6:.2f} us")
hvd.shutdown()
