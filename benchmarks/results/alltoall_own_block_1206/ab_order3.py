"""A/B/C inside one job: where an alltoall copies its own block -- first (as the engine does), last (after
its writes to the peers, before waiting for their "done"), or half first and half last -- batch by batch,
the order rotating. Needs a tree whose alltoall.cc reads the temporary PHV_OWN_LAST switch on every call
(unset: first; 1: last; 2: half and half).

    python3 -m pyhorovod.run -np 2 python3 ab_order3.py 4,16,32,64
"""
import os
import statistics
import sys
import time

import numpy as np

import pyhorovod as hvd

hvd.init()
rank = hvd.rank()
sizes = [int(s) << 20 for s in sys.argv[1].split(",")]
rounds, per_batch = 9, int(sys.argv[2]) if len(sys.argv) > 2 else 10
switch = {"first": None, "last": "1", "half": "2"}
names = list(switch)
for size in sizes:
    x = np.ones(size // 4, np.float32) * rank
    times = {m: [] for m in names}
    for rnd in range(rounds):
        for m in names[rnd % 3:] + names[:rnd % 3]:
            if switch[m]:
                os.environ["PHV_OWN_LAST"] = switch[m]
            else:
                os.environ.pop("PHV_OWN_LAST", None)
            hvd.alltoall(x)
            hvd.allreduce(np.zeros(1, np.float32), name="b")
            t = time.perf_counter()
            for _ in range(per_batch):
                hvd.alltoall(x)
            t = (time.perf_counter() - t) / per_batch
            times[m].append(float(hvd.allreduce(np.array([t]), op=hvd.Max, name="t")[0]))
    if rank == 0:
        last = statistics.median([b / a for a, b in zip(times["first"], times["last"])])
        half = statistics.median([b / a for a, b in zip(times["first"], times["half"])])
        print(f"n={hvd.size()} {size >> 20} MiB: first {statistics.median(times['first']) * 1e3:.3f} ms; "
              f"last/first {last:.3f}; half/first {half:.3f}", flush=True)
