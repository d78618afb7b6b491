"""4-rank broadcast_ through the API: µs per call and context switches per call on rank 0.

    OPENBLAS_NUM_THREADS=1 python -m pyhorovod.run -np 4 python bcast_probe.py   (TAG names the run)
"""
import os
import resource
import time

import numpy as np

import pyhorovod as hvd

hvd.init()
r = hvd.rank()
for n in (4096, 262144):
    x = np.ones(n // 4, np.float32)
    for _ in range(200):
        hvd.broadcast_(x, 0, name="b%d" % n)
    ts = []
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    for rep in range(5):
        hvd.barrier()
        t = time.perf_counter()
        for _ in range(500):
            hvd.broadcast_(x, 0, name="b%d" % n)
        ts.append((time.perf_counter() - t) / 500 * 1e6)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    if r == 0:
        print(os.environ.get("TAG", ""), n, "us/call", sorted(ts)[2], "vcsw", (ru1.ru_nvcsw - ru0.ru_nvcsw) / 2500,
              "ivcsw", (ru1.ru_nivcsw - ru0.ru_nivcsw) / 2500, "sys us", (ru1.ru_stime - ru0.ru_stime) / 2500 * 1e6,
              flush=True)
hvd.shutdown()
