"""Time per blocking pyhorovod.torch.alltoall with splits given, and without, in one set of processes (run under
`pyhorovod run -np N`)."""
import time

import torch

import pyhorovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
x = torch.arange(32 * n, dtype=torch.float32)
splits = [32] * n
for label, call in (("torch splits", lambda: hvd.alltoall(x, splits=splits, name="s")),
                    ("torch no splits", lambda: hvd.alltoall(x, name="n"))):
    for _ in range(100):
        call()
    hvd.barrier()
    t0 = time.perf_counter()
    for _ in range(2000):
        call()
    if r == 0:
        print(label, round((time.perf_counter() - t0) / 2000 * 1e6, 2), "us", flush=True)
out, received = hvd.alltoall(x, splits=splits, name="s")
assert received.dtype == torch.int32 and received.tolist() == [32] * n and out.dtype == torch.float32
hvd.shutdown()
