"""A small allreduce bandwidth table, nccl-tests style (`make allreduce-demo`).

    python -m pyhorovod.run -np 4 python examples/allreduce_demo.py [--max-mib 64] [--iters 10]

Every rank sums float32 buffers of growing size through pyhorovod.allreduce; rank 0 prints, per size,
the median time, algbw = bytes/time and busbw = algbw * 2(n-1)/n (the bytes each rank's link must carry
in a ring, so busbw is comparable across world sizes), and #wrong: elements that differ from the exact
sum (inputs are small integers, so the sum is exact). The full benchmark with peers is
benchmarks/collectives.py.
"""
import argparse
import time

import numpy as np

import pyhorovod as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-mib", type=float, default=64.0, help="largest buffer, MiB")
    parser.add_argument("--iters", type=int, default=10, help="timed iterations per size")
    args = parser.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    sizes = [4]
    while sizes[-1] * 8 <= args.max_mib * (1 << 20):
        sizes.append(sizes[-1] * 8)  # 4 B, 32 B, ... up to max
    if rank == 0:
        print(f"# pyhorovod {hvd.__version__} allreduce (Sum, float32), {size} ranks, "
              f"median of {args.iters} iterations")
        print(f"{'size (B)':>12} {'count':>10} {'time (us)':>11} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13} "
              f"{'#wrong':>7}")
    total_wrong = 0
    for nbytes in sizes:
        count = nbytes // 4
        x = ((np.arange(count) + rank) % 5).astype(np.float32)
        want = sum(((np.arange(count) + r) % 5) for r in range(size)).astype(np.float32)
        out = hvd.allreduce(x, op=hvd.Sum, name=f"demo.{nbytes}")  # warm-up (connections, caches)
        wrong = int(np.count_nonzero(out != want))
        times = []
        for it in range(args.iters):
            t0 = time.perf_counter()
            out = hvd.allreduce(x, op=hvd.Sum, name=f"demo.{nbytes}")
            times.append(time.perf_counter() - t0)
        wrong += int(np.count_nonzero(out != want))
        # The slowest rank defines a collective's time: take the max over ranks of each rank's median.
        t = float(hvd.allreduce(np.array([np.median(times)]), op=hvd.Max, name=f"demo.t.{nbytes}")[0])
        wrong = int(hvd.allreduce(np.array([wrong], np.int64), op=hvd.Sum, name=f"demo.w.{nbytes}")[0])
        total_wrong += wrong
        if rank == 0:
            algbw = nbytes / t / 1e9
            busbw = algbw * 2 * (size - 1) / size
            print(f"{nbytes:>12} {count:>10} {t * 1e6:>11.1f} {algbw:>13.3f} {busbw:>13.3f} {wrong:>7}")
    hvd.shutdown()
    if total_wrong:
        raise SystemExit(f"allreduce gave {total_wrong} wrong elements")


if __name__ == "__main__":
    main()
