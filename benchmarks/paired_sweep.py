"""The collectives sweep with every cell paired inside one set of processes: the public API against Open
MPI (and any other perf_interleave.py candidate), every op, every size, 2 and 4 ranks.

    python benchmarks/paired_sweep.py                                   # 4 B .. 256 MiB by 4x, n = 2 and 4
    python benchmarks/paired_sweep.py --np 4 --ops broadcast --max-bytes 16K --rounds 9
    python benchmarks/paired_sweep.py --json benchmarks/results/paired_sweep.json

Why beside collectives.py: that sweep starts one process group per candidate, so a cell compares two
moments of the machine, and this host flips between a fast and a slow state for seconds at a time (a
cache line's hand-off between the two vCPUs becomes 4-6x slower; RESULTS.md). Here one mpirun launch per
(ranks, op) runs every candidate side by side and they take turns batch by batch (perf_interleave.py), so
each cell's figure is the median over rounds of a ratio measured within the same second.

Printed per (ranks, op, size): the time per call (slowest rank, median over rounds) of the first two
candidates and their CPU time per call (user + system, mean over ranks: with more ranks than cores, a
call cannot take less than cpu x ranks / cores), and for each other candidate the median of its
per-round time over the first one's: above 1 the first candidate is faster. The count of cells at >= 1.0
and >= 0.9 follows. Sizes are as in collectives.py (the gathered output for allgather, one rank's input
for alltoall and reducescatter); a per-rank op skips sizes below one float per rank. --merge prints the
same table over several sweeps' --json results: each ratio's median over the launches and its range.
With core among the candidates, the cells under 0.9 of the second candidate are split by whether the raw
core (our transport's collective without the engine) is itself under 0.9 of it there.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common as C  # noqa: E402

OPS = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")
PER_RANK_OPS = ("allgather", "alltoall", "reducescatter")


def sizes_for(op, n, lo, hi):
    return [s for s in C.size_range(lo, hi, 4) if op not in PER_RANK_OPS or s >= 4 * n]


def run_one(n, op, sizes, cands, rounds, timeout_s):
    """One perf_interleave.py launch; its per-cell records (list of dicts)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cells.json")
        argv = [sys.executable, os.path.join(HERE, "perf_interleave.py"), "--np", str(n), "--op", op,
                "--sizes", ",".join(str(s) for s in sizes), "--cands", " ".join(cands), "--rounds", str(rounds),
                "--timeout", str(timeout_s), "--json", path]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 60)
        if r.returncode != 0:
            raise SystemExit(f"n={n} {op}: perf_interleave.py failed ({r.returncode}):\n{r.stdout[-3000:]}"
                             f"{r.stderr[-3000:]}")
        with open(path) as f:
            return json.load(f)["results"]


def table(launches, cands):
    """Prints every cell's ratios (median over launches, and their range when there are several) and the
    counts; with "core" among the candidates, also why each cell under 0.9 of the second candidate is
    there (see below). launches: one list of perf_interleave.py records per sweep."""
    first, others = cands[0], cands[1:]
    by = {}
    for cells in launches:
        for c in cells:
            by.setdefault((c["n"], c["op"], c["bytes"], c["cand"]), []).append(c)
    keys = sorted({(n, OPS.index(op), b) for n, op, b, _ in by})
    rows, counts, slow = [], {o: [0, 0, 0] for o in others}, []  # >= 1.0, >= 0.9, all
    for n, oi, b in keys:
        op = OPS[oi]
        row = [n, op, C.fmt_size(b)] + [f"{C.median([c[k] for c in by[(n, op, b, cand)]]) * 1e6:.1f}"
                                        for cand in (first, others[0]) for k in ("wall_s", "cpu_s")]
        ratios = {}
        for o in others:
            rs = [c["ratio_to_first"] for c in by[(n, op, b, o)]]
            ratios[o] = C.median(rs)
            row.append(f"{ratios[o]:.2f}" + (f" ({min(rs):.2f}-{max(rs):.2f})" if len(rs) > 1 else ""))
            counts[o][0] += ratios[o] >= 1.0
            counts[o][1] += ratios[o] >= 0.9
            counts[o][2] += 1
        rows.append(row)
        if "core" in ratios and others[0] != "core" and ratios[others[0]] < 0.9:
            # others[0]'s time over the raw core's: under 0.9, the transport itself trails, not the engine
            slow.append((n, op, b, ratios[others[0]] / ratios["core"]))
    C.print_table(["n", "op", "size", f"{first} us", "cpu us", f"{others[0]} us", "cpu us"]
                  + [f"{o}/{first}" for o in others], rows, out=sys.stdout)
    for o, (lead, near, total) in counts.items():
        print(f"{first} at least as fast as {o}: {lead} of {total} cells; at least 0.9x as fast: {near}")
    if slow:
        peer = others[0]
        trail = [f"n={n} {op} {C.fmt_size(b)} ({r:.2f})" for n, op, b, r in slow if r < 0.9]
        print(f"{len(slow)} cells under 0.9 of {peer}; in {len(slow) - len(trail)} of them the raw core is at "
              f"least 0.9x as fast as {peer} (what is left is the engine's per-call work and negotiation); the "
              f"raw core (our transport's own collective, no engine) is under 0.9x as fast as {peer} in: "
              + (", ".join(trail) or "none"))


def main():
    p = C.arg_parser(__doc__)
    p.add_argument("--np", default="2,4", help="comma-separated world sizes")
    p.add_argument("--ops", type=C.choice_list(OPS), default=",".join(OPS), help=C.choices_help(OPS))
    p.add_argument("--min-bytes", type=C.parse_size, default=4)
    p.add_argument("--max-bytes", type=C.parse_size, default=C.parse_size("256M"))
    p.add_argument("--cands", default="api mpi", help="perf_interleave.py candidates, the reference first")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--timeout", type=float, default=900, help="seconds per launch")
    p.add_argument("--json", default="")
    p.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                   help="measure nothing: the table of these sweeps' --json results, ratios over launches")
    args = p.parse_args()
    if args.merge:
        launches = []
        for path in args.merge:
            with open(path) as f:
                got = json.load(f)
            launches.append(got["cells"])
        table(launches, got["cands"])
        return
    ops = [o for o in args.ops.split(",") if o]
    cands = args.cands.split()
    if len(cands) < 2:
        raise SystemExit("--cands: a reference and at least one candidate to pair it with")
    cells, t0 = [], time.time()
    for n in (int(x) for x in args.np.split(",")):
        for op in ops:
            t = time.time()
            got = run_one(n, op, sizes_for(op, n, args.min_bytes, args.max_bytes), cands, args.rounds,
                          args.timeout)
            cells += got
            print(f"n={n} {op:13s} {len(got) // len(cands)} sizes  {time.time() - t:.0f} s  "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    table([cells], cands)
    print(f"({time.time() - t0:.0f} s; each ratio is the median over {args.rounds} rounds)")
    if args.json:
        C.write_result(args.json, {"cands": cands, "cells": cells})


if __name__ == "__main__":
    main()
