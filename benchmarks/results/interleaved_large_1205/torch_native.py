"""pyhorovod.torch allgather/alltoall of tensors from torch's allocator (4 KiB pages) against tensors over
numpy arrays (huge pages from 4 MiB), 16 and 64 MiB; ms per call on rank 0, median of 4 rounds x 4 calls.

    python -m pyhorovod.run -np 2 python torch_native.py
"""
import statistics as st
import time

import numpy as np
import torch

import pyhorovod.torch as hvd

torch.set_num_threads(1)
hvd.init()
n = hvd.size()
out = {}
for mib in (16, 64):
    elems = (mib << 20) // 4
    srcs = {"torch": torch.full((elems,), float(hvd.rank())),
            "numpy": torch.from_numpy(np.full(elems, float(hvd.rank()), np.float32))}
    for rnd in range(4):
        for k, t in srcs.items():
            for op in ("allgather", "alltoall"):
                x = t[: elems // n] if op == "allgather" else t
                f = getattr(hvd, op)
                f(x)
                hvd.barrier()
                t0 = time.perf_counter()
                for _ in range(4):
                    f(x)
                hvd.barrier()
                out.setdefault((mib, op, k), []).append((time.perf_counter() - t0) / 4 * 1e3)
if hvd.rank() == 0:
    for key in sorted(out):
        print(n, *key, f"{st.median(out[key]):.2f} ms")
hvd.shutdown()
