"""nccl-tests-style benchmark of allreduce, allgather, broadcast, alltoall and reducescatter: pyhorovod
against its peers.

    python benchmarks/collectives.py                       # 4 B .. 256 MiB by 4x, n = 2 and 4, every candidate
    python benchmarks/collectives.py --quick               # a few sizes, public APIs and peers: a few minutes
    python benchmarks/collectives.py --np 2 --ops allreduce --sizes 1M,64M --rounds 5

Sizes follow nccl-tests: allreduce and broadcast the buffer, allgather the gathered output, alltoall one
rank's send buffer, reducescatter one rank's input (it keeps 1/n). busbw = algbw * 2(n-1)/n for
allreduce, (n-1)/n for allgather, alltoall and reducescatter, 1 for broadcast.

Candidates (the ones that cannot run here are listed as skipped, with the reason):
  core      pyhorovod._core.Communicator (raw core: no engine), default transports (shared memory on)
  core-tcp  the same with shared memory off (TCP over loopback only)
  core-2copy  the same as core with single-copy reads off (PYHOROVOD_SHM_DIRECT_BYTES=0: two copies per hop)
  api       pyhorovod's public API (pyhorovod.allreduce_ etc.: engine, negotiation, fusion)
  api-tcp   the same with PYHOROVOD_SHM=0
  torch     pyhorovod.torch (allreduce_, allgather, broadcast_, alltoall, reducescatter on CPU tensors)
  mpi       mpi4py over Open MPI, default transports (shared memory between local ranks)
  mpi-tcp   mpi4py over Open MPI with `--mca pml ob1 --mca btl self,tcp` (TCP only)
  gloo      torch.distributed, gloo backend
  hvd-mpi   Horovod 0.28.1 launched by mpirun (MPI controller and ops)
  hvd-gloo  Horovod 0.28.1 launched by `horovodrun --gloo`

Process structure: this driver starts one process group per (round, size block, candidate), each with
its own launcher (our spawner, mpirun or horovodrun); the ranks run benchmarks/collectives_worker.py and
print per-rank JSON records on stdout. This machine flips between fast and slow states (see
shared/anchors.md), so candidates are interleaved: in every round each candidate runs each size block
once, and the candidate order rotates from round to round. Reported: the median over rounds and batches of
the slowest rank's time, and ratios pyhorovod/peer, both from the medians and as the median of per-round
paired ratios (the paired figure is the one that survives a state flip between rounds).
"""
import json
import os
import secrets
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common as C  # noqa: E402
import plotting as P  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "collectives_worker.py")
ALL = ["core", "core-tcp", "core-2copy", "api", "api-tcp", "torch", "mpi", "mpi-tcp", "gloo", "hvd-mpi", "hvd-gloo"]
OURS = ("core", "core-tcp", "core-2copy", "api", "api-tcp", "torch")
OPS = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")
# --quick: the public APIs against the peers at a few sizes (small, middle, large), two interleaved rounds
QUICK = {"candidates": "api,torch,mpi,mpi-tcp,gloo", "sizes": "4,64K,16M", "rounds": 2, "reps": 2,
         "budget_s": 0.1, "warmup": 3}


def availability(cands, hvd_python):
    """candidate -> None if it can run, else the reason it is skipped."""
    out = {}
    try:
        import pyhorovod._core  # noqa: F401
        core_ok = None
    except Exception as e:  # not built yet, or a broken build
        core_ok = f"pyhorovod._core not importable ({type(e).__name__}: {e})"
    mpi_ok = None if shutil.which("mpirun") else "mpirun not found (Open MPI not installed)"
    if mpi_ok is None:
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            mpi_ok = "mpi4py not installed"
    for c in cands:
        if c == "torch":
            try:
                import torch  # noqa: F401
                out[c] = core_ok
            except ImportError:
                out[c] = "torch not installed"
        elif c in OURS:
            out[c] = core_ok
        elif c in ("mpi", "mpi-tcp"):
            out[c] = mpi_ok
        elif c == "gloo":
            try:
                import torch.distributed as dist
                out[c] = None if dist.is_gloo_available() else "torch built without gloo"
            except ImportError:
                out[c] = "torch not installed"
        elif c in ("hvd-mpi", "hvd-gloo"):
            out[c] = None if hvd_python else "Horovod not installed"
            if c == "hvd-mpi" and hvd_python and mpi_ok:
                out[c] = mpi_ok
        else:
            raise ValueError(f"unknown candidate {c!r} (known: {', '.join(ALL)})")
    return out


def launch(cand, n, sizes, args, hvd_python, tag):
    """Run one worker group; returns the parsed per-rank records."""
    wargs = ["--ops", args.ops, "--sizes", ",".join(map(str, sizes)), "--reps", str(args.reps),
             "--warmup", str(args.warmup), "--iter-bytes", str(args.iter_bytes),
             "--min-iters", str(args.min_iters), "--max-iters", str(args.max_iters), "--budget-s", str(args.budget_s),
             "--tag", tag]
    env = C.python_env({"PYHOROVOD_SHM": "0"} if cand == "api-tcp" else
                       {"PYHOROVOD_SHM_DIRECT_BYTES": "0"} if cand == "core-2copy" else None)
    if cand in ("mpi", "mpi-tcp", "hvd-mpi"):
        py = hvd_python if cand == "hvd-mpi" else sys.executable
        argv = C.mpirun_prefix(n, tcp_only=(cand == "mpi-tcp")) + [py, WORKER, cand] + wargs
        group = [(argv, env)]
    elif cand == "hvd-gloo":
        runner = os.path.join(os.path.dirname(hvd_python), "horovodrun")
        argv = [runner, "--gloo", "-np", str(n), "-H", f"localhost:{n}", hvd_python, WORKER, cand] + wargs
        group = [(argv, env)]
    elif cand in ("api", "api-tcp", "torch") and args.api_launcher == "run":
        argv = [sys.executable, "-m", "pyhorovod.run", "-np", str(n), sys.executable, WORKER, cand] + wargs
        group = [(argv, env)]
    else:
        port = C.free_port()
        # core: BENCH_* (rank 0 hosts the store); gloo: torch's env:// rendezvous; api: torchrun-style
        # variables, and pyhorovod's rank 0 hosts its store on PYHOROVOD_STORE_PORT, a port found free
        # (by default it would take MASTER_PORT + 1, which nobody checked: "address already in use" ended
        # launches of the sweep)
        common = {"BENCH_SIZE": str(n), "BENCH_STORE_PORT": str(port), "BENCH_SECRET": secrets.token_hex(16),
                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(n),
                  "LOCAL_WORLD_SIZE": str(n), "PYHOROVOD_STORE_PORT": str(C.free_port())}
        group = []
        for r in range(n):
            e = dict(env, **common, BENCH_RANK=str(r), RANK=str(r), LOCAL_RANK=str(r))
            group.append(([sys.executable, WORKER, cand] + wargs, e))
    recs = C.run_records(group, args.timeout, f"{cand} n={n}")
    want = n * len(sizes) * len(args.ops.split(","))
    if len(recs) != want:
        raise C.LaunchError(f"{cand} n={n}: expected {want} records, got {len(recs)}")
    return recs


def size_blocks(sizes, splits):
    """Cut the size list at the split boundaries (so that large sizes get launches of their own)."""
    blocks, cur, bounds = [], [], sorted(splits)
    for s in sizes:
        if cur and any(cur[-1] < b <= s for b in bounds):
            blocks.append(cur)
            cur = []
        cur.append(s)
    return blocks + ([cur] if cur else [])


def aggregate(records):
    """(n, cand, op, bytes) -> samples: per (round, batch) the slowest rank's seconds per call."""
    by = {}
    for r in records:
        key = (r["n"], r["cand"], r["op"], r["bytes"])
        d = by.setdefault(key, {"ranks": {}, "wrong": 0, "iters": r["iters"]})
        d["wrong"] += r["wrong"]
        for i, t in enumerate(r["times"]):
            slot = d["ranks"].setdefault((r["tag"], i), [])
            slot.append(t)
    out = {}
    for key, d in by.items():
        per_round = {}
        for (tag, _i), ts in d["ranks"].items():
            per_round.setdefault(tag, []).append(max(ts))
        samples = [t for ts in per_round.values() for t in ts]
        n, _, op, nbytes = key
        tmed = C.median(samples)
        out[key] = {"n": n, "cand": key[1], "op": op, "bytes": nbytes, "iters": d["iters"],
                    "time_s": tmed, "algbw": nbytes / tmed / 1e9, "busbw": nbytes / tmed / 1e9 * C.bus_factor(op, n),
                    "round_median_s": {tag: C.median(ts) for tag, ts in sorted(per_round.items())},
                    "samples_s": samples, "wrong": d["wrong"]}
    return out


def ratios(agg):
    """For each of our candidates against each peer at the same (n, op, bytes): time_peer / time_ours
    (> 1: pyhorovod faster), from the medians and as the median of per-round ratios."""
    rows = []
    for (n, cand, op, nbytes), a in sorted(agg.items()):
        if cand not in OURS:
            continue
        for (n2, peer, op2, b2), b in sorted(agg.items()):
            if (n2, op2, b2) != (n, op, nbytes) or peer in OURS:
                continue
            common = set(a["round_median_s"]) & set(b["round_median_s"])
            paired = [b["round_median_s"][t] / a["round_median_s"][t] for t in common]
            rows.append({"n": n, "op": op, "bytes": nbytes, "ours": cand, "peer": peer,
                         "ratio_of_medians": b["time_s"] / a["time_s"],
                         "median_paired_ratio": C.median(paired), "rounds": len(paired)})
    return rows


def best_peer(agg):
    """Per (n, op, bytes): each of our candidates against the fastest peer of that cell; ratio =
    time_best_peer / time_ours (>= 1: pyhorovod leads the cell)."""
    rows = []
    for (n, op, nbytes) in sorted({(k[0], k[2], k[3]) for k in agg}, key=lambda c: (c[0], OPS.index(c[1]), c[2])):
        peers = [(a["time_s"], k[1]) for k, a in agg.items()
                 if k[1] not in OURS and (k[0], k[2], k[3]) == (n, op, nbytes)]
        if not peers:
            continue
        t_peer, peer = min(peers)
        for cand in OURS:
            a = agg.get((n, cand, op, nbytes))
            if a is not None:
                rows.append({"n": n, "op": op, "bytes": nbytes, "ours": cand, "time_us": a["time_s"] * 1e6,
                             "best_peer": peer, "peer_time_us": t_peer * 1e6, "ratio": t_peer / a["time_s"]})
    return rows


def print_results(agg, rat):
    keys = sorted(agg, key=lambda k: (k[0], k[2], ALL.index(k[1]), k[3]))
    last = None
    rows = []
    for k in keys:
        a = agg[k]
        if (a["n"], a["op"], a["cand"]) != last:
            if rows:
                C.print_table(["size", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "rounds min..max(us)",
                               "#wrong"], rows)
                rows = []
            last = (a["n"], a["op"], a["cand"])
            print(f"\n# {a['op']}  n={a['n']}  {a['cand']}  (float32, median of rounds x batches, slowest rank)")
        rm = list(a["round_median_s"].values())
        rows.append([C.fmt_size(a["bytes"]), a["bytes"] // 4, f"{a['time_s'] * 1e6:.1f}", f"{a['algbw']:.3f}",
                     f"{a['busbw']:.3f}", f"{min(rm) * 1e6:.0f}..{max(rm) * 1e6:.0f}", a["wrong"]])
    if rows:
        C.print_table(["size", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "rounds min..max(us)", "#wrong"],
                      rows)
    if rat:
        print("\n# ratios time_peer/time_ours (> 1: pyhorovod faster)")
        C.print_table(["n", "op", "size", "ours", "peer", "of medians", "paired (median)", "rounds"],
                      [[r["n"], r["op"], C.fmt_size(r["bytes"]), r["ours"], r["peer"], f"{r['ratio_of_medians']:.3g}",
                        f"{r['median_paired_ratio']:.3g}", r["rounds"]] for r in rat])
    best = best_peer(agg)
    if best:
        print("\n# against the fastest peer of each cell: time_best_peer/time_ours (>= 1: pyhorovod leads)")
        C.print_table(["n", "op", "size", "ours", "time(us)", "best peer", "peer(us)", "ratio"],
                      [[r["n"], r["op"], C.fmt_size(r["bytes"]), r["ours"], f"{r['time_us']:.1f}", r["best_peer"],
                        f"{r['peer_time_us']:.1f}", f"{r['ratio']:.2f}"] for r in best])


def figure(agg):
    """Per op (rows) and world size: time per call and busbw against message size, all on log axes."""
    ops = sorted({k[2] for k in agg}, key=OPS.index)
    ns = sorted({k[0] for k in agg})
    fig, axes = P.new_figure(len(ops), 2 * len(ns))
    for i, op in enumerate(ops):
        for j, n in enumerate(ns):
            t_ax, bw_ax = axes[i][2 * j], axes[i][2 * j + 1]
            for cand in ALL:
                pts = sorted((k[3], a["time_s"], a["busbw"]) for k, a in agg.items() if k[:3] == (n, cand, op))
                if pts:
                    sizes = [p[0] for p in pts]
                    color = f"C{ALL.index(cand)}"   # one colour per candidate in every panel
                    P.measured(t_ax, sizes, [p[1] * 1e6 for p in pts], cand, cand in OURS, color=color)
                    P.measured(bw_ax, sizes, [p[2] for p in pts], cand, cand in OURS, color=color)
            sizes = sorted({k[3] for k in agg if k[0] == n and k[2] == op})
            for ax, what, label in ((t_ax, "time per call", "time per call (us)"), (bw_ax, "busbw", "busbw (GB/s)")):
                P.size_axis(ax, sizes)
                P.log_axis(ax, label)
                ax.set_title(f"{op}, n={n}: {what}")
                ax.grid(True, which="both", alpha=0.3)
            P.legend_outside(bw_ax)
    return fig


def plot(agg, path):
    P.save(figure(agg), path)


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--np", default="2,4", help="world sizes, comma-separated")
    p.add_argument("--candidates", default=",".join(ALL), type=C.choice_list(ALL), help=C.choices_help(ALL))
    p.add_argument("--ops", default=",".join(OPS), type=C.choice_list(OPS), help=C.choices_help(OPS))
    p.add_argument("--sizes", default="", help="explicit sizes (e.g. 1M,64M); else --min-bytes..--max-bytes")
    p.add_argument("--min-bytes", default="4")
    p.add_argument("--max-bytes", default="256M")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=3, help="timed batches per size per launch")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iter-bytes", type=C.parse_size, default=64 << 20,
                   help="calls per batch = this / size, clamped to [--min-iters, --max-iters]")
    p.add_argument("--min-iters", type=int, default=3)
    p.add_argument("--max-iters", type=int, default=200)
    p.add_argument("--budget-s", type=float, default=0.5, help="calls per batch cut to take about this long")
    p.add_argument("--split", default="1M,32M", help="size block boundaries (one launch per block)")
    p.add_argument("--timeout", type=float, default=600.0, help="hard limit per launch, seconds")
    p.add_argument("--api-launcher", choices=("spawn", "run"), default="spawn")
    p.add_argument("--json", default="collectives.json")
    p.add_argument("--png", default="collectives.png")
    p.add_argument("--replot", metavar="JSON", help="measure nothing: draw --png from this earlier result")
    p.add_argument("--quick", action="store_true",
                   help="a few minutes: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items())
                   + " (options given explicitly win)")
    args = p.parse_args(argv)
    if args.quick:
        given = {a.split("=")[0] for a in (sys.argv[1:] if argv is None else argv) if a.startswith("--")}
        for k, v in QUICK.items():
            if f"--{k.replace('_', '-')}" not in given:
                setattr(args, k, v)
    if args.replot:
        with open(args.replot) as f:
            agg = {(a["n"], a["cand"], a["op"], a["bytes"]): a for a in json.load(f)["results"]}
        plot(agg, args.png)
        print(f"wrote {args.png}")
        return 0
    sizes = ([C.parse_size(s) for s in args.sizes.split(",")] if args.sizes
             else C.size_range(C.parse_size(args.min_bytes), C.parse_size(args.max_bytes), args.factor))
    nps = [int(x) for x in args.np.split(",")]
    cands = [c for c in args.candidates.split(",") if c]
    hvd_python = C.find_horovod_python() if any(c.startswith("hvd") for c in cands) else None
    avail = availability(cands, hvd_python)
    skipped = {c: why for c, why in avail.items() if why}
    for c, why in skipped.items():
        print(f"skipping {c}: {why}", flush=True)
    run = [c for c in cands if not avail[c]]
    blocks = size_blocks(sizes, [C.parse_size(s) for s in args.split.split(",") if s])
    records, failures, fails = [], [], {}
    t_start = time.time()
    for n in nps:
        for rnd in range(args.rounds):
            order = run[rnd % len(run):] + run[:rnd % len(run)] if run else []
            for block in blocks:
                for cand in order:
                    if fails.get((cand, n), 0) >= 2:
                        continue
                    t0 = time.time()
                    try:
                        recs = launch(cand, n, block, args, hvd_python, tag=f"r{rnd}")
                    except C.LaunchError as e:
                        fails[(cand, n)] = fails.get((cand, n), 0) + 1
                        failures.append({"cand": cand, "n": n, "round": rnd, "error": str(e)[-4000:]})
                        print(f"FAILED {cand} n={n} round {rnd}:\n{e}", flush=True)
                        continue
                    records += recs
                    print(f"n={n} round {rnd} {cand:9s} sizes {C.fmt_size(block[0])}..{C.fmt_size(block[-1])}"
                          f" {time.time() - t0:5.1f}s", flush=True)
    agg = aggregate(records)
    rat = ratios(agg)
    print_results(agg, rat)
    C.write_result(args.json, {
        "meta": {"argv": sys.argv, "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t_start)),
                 "seconds": time.time() - t_start, "cpus": os.cpu_count(), "dtype": "float32",
                 "method": "median over rounds x batches of the slowest rank's time per call"},
        "skipped": skipped, "failures": failures,
        "results": sorted(agg.values(), key=lambda a: (a["n"], a["op"], a["cand"], a["bytes"])),
        "ratios": rat, "best_peer": best_peer(agg)})
    if agg and args.png:
        plot(agg, args.png)
    print(f"\nwrote {args.json}" + (f" and {args.png}" if agg and args.png else ""))
    return 1 if failures or any(a["wrong"] for a in agg.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
