"""Adasum's allreduce against Sum's, on the raw core (pyhorovod._core.Communicator, no engine).

    flock /tmp/bench.lock python3 benchmarks/adasum.py                 # 64 MiB float32, 2 and 4 ranks
    python3 benchmarks/adasum.py --np 2 --size 16M --rounds 5 --iters 3

Paired and interleaved: every rank process runs both ops; each round times `iters` back-to-back calls of
one op, then of the other (the order alternates between rounds), each after a barrier. A call's time is
the slowest rank's. Reported per op: the median busbw over rounds (busbw = size * 2(n-1)/n / time, the
nccl-tests allreduce figure, for both ops: Adasum's halving moves the same bytes as the ring), and the
median of the per-round ratios Adasum/Sum, and the CPU time per call (the busiest rank's median; it
does not stretch with the machine's load as wall time does). Sum runs on zeros in place (a sum of data
grows without bound over the calls); Adasum on random data per rank (after the first call all ranks hold
the same vector, which Adasum then returns unchanged, so the values stay bounded; the cost does not depend
on the values).
"""
import argparse
import os
import secrets
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))
import common as C  # noqa: E402

OPS = ("Sum", "Adasum")


def worker(args):
    from collectives_worker import CoreBackend, TIMEOUT_S
    be = CoreBackend(shm=True)
    count = args.size // 4
    bufs = {"Sum": np.zeros(count, np.float32),
            "Adasum": np.random.default_rng(be.rank).standard_normal(count).astype(np.float32)}
    codes = {"Sum": be.c.SUM, "Adasum": be.c.ADASUM}
    for op in OPS:  # warm-up: pages touched, scratch grown
        be.comm.allreduce(bufs[op], be.c.FLOAT32, codes[op], TIMEOUT_S)
    for rnd in range(args.rounds):
        for op in (OPS if rnd % 2 == 0 else OPS[::-1]):
            be.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(args.iters):
                be.comm.allreduce(bufs[op], be.c.FLOAT32, codes[op], TIMEOUT_S)
            C.emit({"rank": be.rank, "round": rnd, "op": op, "t": (time.perf_counter() - t0) / args.iters,
                    "cpu": (time.process_time() - c0) / args.iters})
    be.close()


def drive(args):
    rows = []
    for n in args.np:
        port = C.free_port()
        common = {"BENCH_SIZE": str(n), "BENCH_STORE_PORT": str(port), "BENCH_SECRET": secrets.token_hex(16)}
        argv = [sys.executable, os.path.abspath(__file__), "--worker", "--size", str(args.size),
                "--rounds", str(args.rounds), "--iters", str(args.iters)]
        group = [(argv, C.python_env(dict(common, BENCH_RANK=str(r)))) for r in range(n)]
        recs = C.run_records(group, args.timeout, f"adasum n={n}")
        slowest, cpu = {}, {}
        for rec in recs:
            key = (rec["round"], rec["op"])
            slowest[key] = max(slowest.get(key, 0.0), rec["t"])
            cpu[key] = max(cpu.get(key, 0.0), rec["cpu"])
        bus = args.size * C.bus_factor("allreduce", n)
        busbw = {op: [bus / slowest[(r, op)] / 1e9 for r in range(args.rounds)] for op in OPS}
        paired = [slowest[(r, "Sum")] / slowest[(r, "Adasum")] for r in range(args.rounds)]
        rows.append([str(n), C.fmt_size(args.size), f"{C.median(busbw['Sum']):.2f}",
                     f"{C.median(busbw['Adasum']):.2f}", f"{C.median(paired):.2f}",
                     " / ".join(f"{1e3 * C.median([cpu[(r, op)] for r in range(args.rounds)]):.1f}" for op in OPS),
                     " ".join(f"{x:.2f}" for x in paired)])
    C.print_table(["n", "size", "Sum busbw GB/s", "Adasum busbw GB/s", "Adasum/Sum (paired median)",
                   "CPU ms per call Sum / Adasum", "per-round ratios"], rows)


def main():
    ap = C.arg_parser(__doc__)
    ap.add_argument("--np", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4],
                    help="rank counts, comma-separated")
    ap.add_argument("--size", type=C.parse_size, default=64 << 20, help="bytes of float32 (64M = 64 MiB)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved Sum/Adasum rounds")
    ap.add_argument("--iters", type=int, default=3, help="timed calls per round")
    ap.add_argument("--timeout", type=float, default=600, help="seconds before a launch is killed")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    worker(args) if args.worker else drive(args)


if __name__ == "__main__":
    main()
