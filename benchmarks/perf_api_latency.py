"""Latency of a synchronous 1-float pyhorovod.allreduce, named against unnamed.

    python -m pyhorovod.run -np 4 python benchmarks/perf_api_latency.py [--rounds 15] [--iters 200]

A named call ("lat") is cached after its first call; an unnamed synchronous call reuses the name
"allreduce.noname.sync" (pyhorovod/_api.py), so it is cached too (before that change each unnamed call
got a fresh counter name and always missed the cache). The two alternate round by round (the machine flips
between fast and slow states); rank 0 prints the median over rounds of the mean time per call.
"""
import os
import sys
import statistics
import time

import numpy as np

import pyhorovod as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def main():
    p = C.arg_parser(__doc__)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--iters", type=int, default=200)
    args = p.parse_args()
    hvd.init()
    one = np.ones(1, np.float32)
    calls = {"named": lambda: hvd.allreduce(one, op=hvd.Sum, name="lat"),
             "unnamed": lambda: hvd.allreduce(one, op=hvd.Sum)}
    for _ in range(50):
        for call in calls.values():
            call()
    res = {k: [] for k in calls}
    for rnd in range(args.rounds):
        for k in (("named", "unnamed") if rnd % 2 else ("unnamed", "named")):
            hvd.barrier()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                calls[k]()
            res[k].append((time.perf_counter() - t0) / args.iters * 1e6)
    if hvd.rank() == 0:
        print(f"n={hvd.size()}: synchronous 1-float allreduce, median over {args.rounds} rounds (us per call): "
              + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in res.items()), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
