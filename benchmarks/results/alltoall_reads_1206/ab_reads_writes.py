"""A/B inside one job: a 2-rank alltoall with offers (the receiver reads the huge-page middle of each
block) against without (the sender writes it), batch by batch in alternating order. Needs the tree of
offers.diff, whose PHV_NO_OFFERS switch is read on every call.

    python3 -m pyhorovod.run -np 2 python3 ab_reads_writes.py 16,64,256
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
rounds, per_batch = 9, 10
for size in sizes:
    x = np.ones(size // 4, np.float32) * rank
    times = {"reads": [], "writes": []}
    for rnd in range(rounds):
        for mode in ("reads", "writes") if rnd % 2 == 0 else ("writes", "reads"):
            if mode == "writes":
                os.environ["PHV_NO_OFFERS"] = "1"
            else:
                os.environ.pop("PHV_NO_OFFERS", None)
            hvd.alltoall(x)
            hvd.allreduce(np.zeros(1, np.float32), name="b")
            t = time.perf_counter()
            for _ in range(per_batch):
                hvd.alltoall(x)
            t = (time.perf_counter() - t) / per_batch
            times[mode].append(float(hvd.allreduce(np.array([t]), op=hvd.Max, name="t")[0]))
    if rank == 0:
        ratios = [w / r for w, r in zip(times["writes"], times["reads"])]
        print(f"{size >> 20} MiB: reads {statistics.median(times['reads']) * 1e3:.3f} ms, "
              f"writes {statistics.median(times['writes']) * 1e3:.3f} ms, "
              f"writes/reads median {statistics.median(ratios):.3f} "
              f"range {min(ratios):.3f}..{max(ratios):.3f}", flush=True)
