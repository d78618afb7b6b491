"""Allreduce bus bandwidth of CUDA tensors through pyhorovod (engine + GPU backend, NCCL), nccl-tests style.

    python -m pyhorovod.run -np <GPUs> python benchmarks/gpu_busbw.py [--max-mib 256] [--iters 20]

Each rank uses GPU local_rank. Per size: warm-up, then `iters` synchronous allreduce_ calls timed with
the device synchronised before and after; the reported time is the slowest rank's mean. algbw = bytes /
time; busbw = algbw * 2 (n - 1) / n (what each link carries in a ring, as nccl-tests defines it; 0 for
one rank, where the figure that matters is the per-call overhead in the time column).
"""
import os
import sys
import time

import torch

import pyhorovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def main():
    p = C.arg_parser(__doc__)
    p.add_argument("--max-mib", type=int, default=256)
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    hvd.init()
    torch.cuda.set_device(hvd.local_rank())
    dev = torch.device("cuda", hvd.local_rank())
    n = hvd.size()
    if hvd.rank() == 0:
        print(f"pyhorovod GPU allreduce (float32, Sum), {n} rank(s), {torch.cuda.get_device_name(dev)}")
        print(f"{'bytes':>12} {'time_us':>10} {'algbw_GB/s':>11} {'busbw_GB/s':>11}")
    size = 4096
    while size <= args.max_mib << 20:
        x = torch.ones(size // 4, device=dev)
        for _ in range(3):
            hvd.allreduce_(x, op=hvd.Sum)
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(args.iters):
            hvd.allreduce_(x, op=hvd.Sum)
        torch.cuda.synchronize(dev)
        dt = (time.perf_counter() - t0) / args.iters
        worst = float(hvd.allreduce(torch.tensor([dt]), op=hvd.Max))  # CPU tensor: the slowest rank
        if hvd.rank() == 0:
            algbw = size / worst / 1e9
            print(f"{size:>12} {worst * 1e6:>10.1f} {algbw:>11.2f} {algbw * 2 * (n - 1) / n:>11.2f}", flush=True)
        size *= 4
    hvd.shutdown()


if __name__ == "__main__":
    main()
