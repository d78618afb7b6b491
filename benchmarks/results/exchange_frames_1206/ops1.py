"""Local work of the blocking small ops in a one-rank job (or per call at N ranks under a launcher): best
of 5 x 5,000 calls after 2,000 (timeit), three rounds, the last printed by rank 0.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=<tree> python ops1.py
"""
import timeit

import numpy as np

import pyhorovod as hvd

hvd.init()
n = hvd.size()
a = np.ones(4 * n, np.float32)
calls = {"allreduce_": lambda: hvd.allreduce_(a, op=hvd.Sum),
         "allreduce": lambda: hvd.allreduce(a, op=hvd.Sum),
         "allgather": lambda: hvd.allgather(a),
         "broadcast_": lambda: hvd.broadcast_(a, root_rank=0),
         "alltoall": lambda: hvd.alltoall(a),
         "reducescatter": lambda: hvd.reducescatter(a, op=hvd.Sum)}
for rnd in range(3):
    for k, f in calls.items():
        timeit.timeit(f, number=2000)
        best = min(timeit.repeat(f, number=5000, repeat=5)) / 5000
        if rnd == 2 and hvd.rank() == 0:
            print(f"n={n} {k:16s} {best * 1e6:.2f} us", flush=True)
hvd.shutdown()
