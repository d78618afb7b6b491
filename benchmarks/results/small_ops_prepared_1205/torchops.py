"""4 B-scale blocking pyhorovod.torch collectives, µs per call on rank 0 (the paired before/after of
RESULTS.md). torch's intra-op threads are left at their default.

    python -m pyhorovod.run -np N python torchops.py
"""
import torch

import pyhorovod.torch as hvd
from smallops import report  # this script's own directory is on sys.path

hvd.init()
n = hvd.size()
x = torch.ones(1)
xs = torch.ones(n)
report({"allreduce": lambda: hvd.allreduce(x, op=hvd.Sum, name="a"),
        "allreduce_": lambda: hvd.allreduce_(x, op=hvd.Sum, name="a_"),
        "broadcast": lambda: hvd.broadcast(x, 0, name="b"),
        "allgather": lambda: hvd.allgather(x, name="g"),
        "alltoall": lambda: hvd.alltoall(xs, name="t"),
        "reducescatter": lambda: hvd.reducescatter(xs, op=hvd.Sum, name="r")}, hvd.rank())
hvd.shutdown()
