"""Allreduce bus bandwidth of CUDA tensors through pyhorovod (engine + GPU backend), nccl-tests style.

    python -m pyhorovod.run -np <ranks> python benchmarks/gpu_busbw.py [--max-mib 256] [--iters 20] [--json F]

Each rank uses GPU local_rank modulo the visible devices, so more ranks than GPUs share them (the
host-staged path; PYHOROVOD_GPU_PATH forces a path). Per size: warm-up, then `iters` synchronous
allreduce_ calls timed with the device synchronised before and after; the reported time is the slowest
rank's mean. algbw = bytes / time; busbw = algbw * 2 (n - 1) / n (what each link carries in a ring, as
nccl-tests defines it; 0 for one rank, where the figure that matters is the per-call overhead in the time
column). Rank 0 also measures pinned host <-> device copy bandwidth at the largest size, the bound of the
host-staged path (which copies every byte down and back up once).
"""
import json
import os
import sys
import time

import torch

import pyhorovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def pinned_copy_gbps(dev, nbytes, iters=5):
    """(device -> pinned host, pinned host -> device) GB/s for nbytes, timed on the current stream."""
    d = torch.empty(nbytes // 4, device=dev)
    h = torch.empty(nbytes // 4, pin_memory=True)
    out = []
    for dst, src in ((h, d), (d, h)):
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(iters):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(dev)
        out.append(nbytes * iters / (time.perf_counter() - t0) / 1e9)
    return out


def main():
    p = C.arg_parser(__doc__)
    p.add_argument("--max-mib", type=int, default=256)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json", default="", help="write the table (rank 0) to this file")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_busbw.py: no CUDA device visible to torch")
    hvd.init()
    device = hvd.local_rank() % torch.cuda.device_count()
    torch.cuda.set_device(device)
    dev = torch.device("cuda", device)
    n = hvd.size()
    rows = []
    if hvd.rank() == 0:
        print(f"pyhorovod GPU allreduce (float32, Sum), {n} rank(s) on {torch.cuda.device_count()} visible GPU(s), "
              f"{torch.cuda.get_device_name(dev)}")
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
            busbw = algbw * 2 * (n - 1) / n
            rows.append({"bytes": size, "time_s": worst, "algbw_gbps": algbw, "busbw_gbps": busbw})
            print(f"{size:>12} {worst * 1e6:>10.1f} {algbw:>11.2f} {busbw:>11.2f}", flush=True)
        size *= 4
    if hvd.rank() == 0:
        d2h, h2d = pinned_copy_gbps(dev, rows[-1]["bytes"])
        # The staged path moves each byte down and up once: its algbw cannot beat the two copies in series.
        bound = 1.0 / (1.0 / d2h + 1.0 / h2d)
        print(f"pinned copies at {rows[-1]['bytes']} bytes: device->host {d2h:.2f} GB/s, host->device {h2d:.2f} GB/s;"
              f" both in series {bound:.2f} GB/s; largest size's algbw = {rows[-1]['algbw_gbps'] / bound:.2f} of that")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": n, "gpus": torch.cuda.device_count(), "rows": rows, "pinned_d2h_gbps": d2h,
                           "pinned_h2d_gbps": h2d, "pinned_series_gbps": bound}, f, indent=1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
