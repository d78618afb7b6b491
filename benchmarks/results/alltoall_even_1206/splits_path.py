"""Time per blocking alltoall with splits given (even and uneven), against the same call without splits, in one
set of processes; run from the tree to measure (PYTHONPATH) under `pyhorovod run -np N`. With the argument
`torch`: pyhorovod.torch on tensors (torch_splits_pair.txt), else the numpy API (splits_path_*.txt)."""
import statistics
import sys
import time

import numpy as np

if sys.argv[1:] == ["torch"]:
    import torch

    import pyhorovod.torch as hvd
    make = torch.from_numpy
else:
    import pyhorovod as hvd

    def make(a):
        return a

hvd.init()
r, n = hvd.rank(), hvd.size()
per = 32   # float32 rows per destination: 128 B blocks
x = make(np.arange(per * n, dtype=np.float32))
uneven = [per] * n
uneven[(r + 1) % n] -= 1
uneven[(r - 1) % n] += 1
cases = {
    "no splits": lambda: hvd.alltoall(x, name="a"),
    "even splits": lambda: hvd.alltoall(x, splits=[per] * n, name="b"),
    "uneven splits": lambda: hvd.alltoall(x, splits=uneven, name="c"),
}
times = {k: [] for k in cases}
for rnd in range(5):
    for k, f in cases.items():
        for _ in range(20):
            f()
        hvd.barrier()
        t0 = time.perf_counter()
        for _ in range(300):
            f()
        times[k].append((time.perf_counter() - t0) / 300 * 1e6)
out, received = hvd.alltoall(x, splits=uneven, name="c")
# rank s sends one row less to s + 1 and one more to s - 1
assert list(received) == [per + (s == (r + 1) % n) - (s == (r - 1) % n) for s in range(n)], received
if r == 0:
    print("  ".join(f"{k} {statistics.median(v):6.1f} us" for k, v in times.items()), flush=True)
hvd.shutdown()
