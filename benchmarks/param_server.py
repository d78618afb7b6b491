"""Ring allreduce against a simple parameter server, over the raw core, measured.

    python benchmarks/param_server.py --netns --rate-mbit 1000 --np 2,3 --sizes 16M     # shaped links
    python benchmarks/param_server.py --np 2,3,4 --sizes 16M                            # loopback only

Parameter server (benchmark only, not part of the library): S servers = ranks 0..S-1, each owning one
shard of the buffer (shard s = bytes [s*M/S, (s+1)*M/S), cut at float boundaries).
  push    every rank sends shard s to server s          (_core alltoallv, zero bytes to non-servers)
  reduce  server s adds the n shards it received         (numpy, on the server only)
  pull    server s sends its reduced shard to every rank (_core alltoallv)
With one server, the server's link carries (n-1)M in each phase; the ring's carries 2(n-1)/n M in all.

With --netns every rank runs in its own network namespace (tests/netns.py: one bridge, a veth pair per
"host"), and both directions of each host's link are shaped to --rate-mbit with tbf: the host side of the
veth limits what it sends, the bridge side what it receives, like a full-duplex NIC. Candidates run
interleaved (ring, ps, ring, ps, ...) round by round; medians of the slowest rank.
"""
import argparse
import os
import random
import secrets
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import common as C  # noqa: E402

TIMEOUT_S = 300.0


def shard_bounds(count, servers):
    """Element ranges [lo, hi) of the S shards of a count-element buffer."""
    return [(count * s // servers, count * (s + 1) // servers) for s in range(servers)]


def ps_allreduce(comm, core, buf, servers, scratch):
    """Sum-allreduce of float32 `buf` in place through S parameter servers (see the module docstring)."""
    n, r = comm.size, comm.rank
    bounds = shard_bounds(buf.size, servers)
    lens = [(hi - lo) * 4 for lo, hi in bounds]
    send_bytes = lens + [0] * (n - servers)
    if r < servers:
        mine = lens[r] // 4
        recv = scratch[: n * mine]
        comm.alltoallv(buf, send_bytes, recv, [lens[r]] * n, TIMEOUT_S)
        total = recv.reshape(n, mine).sum(axis=0, dtype=np.float32)
        out = np.tile(total, n) if n > 1 else total
        comm.alltoallv(out, [lens[r]] * n, buf, send_bytes, TIMEOUT_S)
    else:
        comm.alltoallv(buf, send_bytes, scratch[:0], [0] * n, TIMEOUT_S)
        comm.alltoallv(scratch[:0], [0] * n, buf, send_bytes, TIMEOUT_S)


def worker(args):
    from pyhorovod import _core
    rank, size = int(os.environ["BENCH_RANK"]), int(os.environ["BENCH_SIZE"])
    host, port = os.environ["BENCH_STORE_HOST"], int(os.environ["BENCH_STORE_PORT"])
    secret = bytes.fromhex(os.environ["BENCH_SECRET"])
    server = _core.TcpStoreServer(host, port, secret) if rank == 0 else None
    o = _core.ConnectOptions()
    o.rank, o.size = rank, size
    o.local_rank, o.local_size = (0, 1) if args.netns else (rank, size)
    o.store_host, o.store_port, o.secret = host, port, secret
    o.bind_host, o.store_prefix, o.connect_timeout_s = os.environ["BENCH_BIND"], "ps", 60.0
    o.shm_enable = False     # the point is the network: no shared-memory shortcut even on loopback
    comm = _core.Communicator(o)
    for nbytes in (int(s) for s in args.sizes.split(",")):
        count = max(size, nbytes // 4)
        idx = (np.arange(count) % 7 + 1).astype(np.float32)
        buf = idx * (rank + 1)
        scratch = np.empty(count * size // max(1, args.servers) + size * 8, dtype=np.float32)
        if args.alg == "ring":
            call = lambda: comm.allreduce(buf, _core.FLOAT32, _core.SUM, TIMEOUT_S, "ring")  # noqa: E731
        else:
            call = lambda: ps_allreduce(comm, _core, buf, min(args.servers, size), scratch)  # noqa: E731
        call()
        wrong = int(np.count_nonzero(buf != idx * (size * (size + 1) // 2)))
        buf[:] = 0
        times = []
        for _ in range(args.reps):
            comm.barrier(TIMEOUT_S)
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        wrong += int(np.count_nonzero(buf))
        C.emit({"cand": args.alg, "n": size, "rank": rank, "bytes": count * 4, "times": times,
                "wrong": wrong, "tag": args.tag})
    comm.barrier(TIMEOUT_S)
    comm.close()
    if server is not None:
        server.close()


def shape_network(net, rate_mbit):
    """Both directions of every host's link: egress of the inside end, egress of the bridge end."""
    import subprocess
    burst = max(65536, int(rate_mbit * 1e6 / 8 * 0.01))
    for i, h in enumerate(net.hosts):
        h.shape("hv0", rate_mbit=rate_mbit)
        outside = f"pv{net.tag}{i}0"
        subprocess.run(["tc", "qdisc", "replace", "dev", outside, "root", "tbf", "rate", f"{rate_mbit}mbit",
                        "burst", str(burst), "latency", "100ms"], check=True, capture_output=True, timeout=10)


def launch(alg, n, args, net, tag):
    port = random.randint(20000, 60000) if net else C.free_port()
    host0 = net.hosts[0].addr("hv0") if net else "127.0.0.1"
    argv_tail = [sys.executable, os.path.abspath(__file__), "--worker", "--alg", alg, "--sizes", args.sizes_bytes,
                 "--reps", str(args.reps), "--servers", str(args.servers), "--tag", tag] + (["--netns"] if net else [])
    group = []
    for r in range(n):
        env = C.python_env({"BENCH_RANK": str(r), "BENCH_SIZE": str(n), "BENCH_STORE_HOST": host0,
                            "BENCH_STORE_PORT": str(port), "BENCH_SECRET": secrets.token_hex(16),
                            "BENCH_BIND": net.hosts[r].addr("hv0") if net else "127.0.0.1"})
        if r > 0:
            env["BENCH_SECRET"] = group[0][1]["BENCH_SECRET"]
        argv = net.hosts[r].argv(argv_tail) if net else argv_tail
        group.append((argv, env))
    return C.run_records(group, args.timeout, f"{alg} n={n}")


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--alg", default="ring", help=argparse.SUPPRESS)
    p.add_argument("--tag", default="", help=argparse.SUPPRESS)
    p.add_argument("--np", default="2,3")
    p.add_argument("--sizes", default="16M")
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--netns", action="store_true", help="one network namespace per rank, shaped links")
    p.add_argument("--rate-mbit", type=float, default=1000.0)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", default="param_server.json")
    p.add_argument("--png", default="param_server.png")
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    args.sizes_bytes = ",".join(str(C.parse_size(s)) for s in args.sizes.split(","))
    nps = [int(x) for x in args.np.split(",")]
    records = []
    t0 = time.time()
    for n in nps:
        net = None
        if args.netns:
            sys.path.insert(0, os.path.join(ROOT, "tests"))
            from netns import Network, netns_unavailable_reason
            why = netns_unavailable_reason()
            if why:
                raise SystemExit(f"--netns: {why}")
            net = Network(hosts=n, subnets=1)
            shape_network(net, args.rate_mbit)
        try:
            for rnd in range(args.rounds):
                for alg in (["ring", "ps"] if rnd % 2 == 0 else ["ps", "ring"]):
                    t1 = time.time()
                    records += launch(alg, n, args, net, f"r{rnd}")
                    print(f"n={n} round {rnd} {alg:4s} {time.time() - t1:5.1f}s", flush=True)
        finally:
            if net:
                net.close()
    return report(records, args, t0)


def figure(results, args):
    """Allreduce time against ranks (log time axis): measured points with markers; with --netns the cost
    model's prediction as a dotted line without markers."""
    import plotting as P   # here: the ranks (--worker) never need matplotlib
    fig, axes = P.new_figure(1, 1, width=6, height=4)
    ax = axes[0][0]
    for i, (alg, nbytes) in enumerate((a, b) for a in ("ring", "ps") for b in sorted({r["bytes"] for r in results})):
        rs = sorted((r for r in results if r["alg"] == alg and r["bytes"] == nbytes), key=lambda r: r["n"])
        if not rs:
            continue
        name = f"{alg} {P.size_label(nbytes)}"
        P.measured(ax, [r["n"] for r in rs], [r["time_s"] * 1e3 for r in rs], name, alg == "ring",
                   role=None if alg == "ring" else "baseline, benchmark only", color=f"C{i}")
        if all(r["model_s"] for r in rs):
            ax.plot([r["n"] for r in rs], [r["model_s"] * 1e3 for r in rs], ls=":", color=f"C{i}",
                    label=f"{name} (model)")
    P.count_axis(ax, [r["n"] for r in results], "ranks")
    P.log_axis(ax, "allreduce time (ms)")
    ax.set_title("ring vs parameter server" + (f", {args.rate_mbit:g} Mbit/s links" if args.netns else ""))
    ax.grid(True, which="both", alpha=0.3)
    P.legend_outside(ax)
    return fig


def report(records, args, t0):
    from pyhorovod.scaling import cost_model as cm
    rows, results = [], []
    keys = sorted({(r["n"], r["bytes"], r["cand"]) for r in records})
    for n, nbytes, alg in keys:
        recs = [r for r in records if (r["n"], r["bytes"], r["cand"]) == (n, nbytes, alg)]
        batches = {}
        for r in recs:
            for i, t in enumerate(r["times"]):
                batches.setdefault((r["tag"], i), []).append(t)
        samples = [max(v) for v in batches.values()]
        t = C.median(samples)
        wrong = sum(r["wrong"] for r in recs)
        pred = None
        if args.netns:
            net = cm.Network(0.0, args.rate_mbit * 1e6 / 8)
            pred = (cm.ring_allreduce_time(nbytes, n, net) if alg == "ring" else
                    cm.parameter_server_time(nbytes, n, net, servers=min(args.servers, n), colocated=True))
        results.append({"alg": alg, "n": n, "bytes": nbytes, "time_s": t, "samples_s": samples, "wrong": wrong,
                        "model_s": pred})
        rows.append([alg, n, C.fmt_size(nbytes), f"{t * 1e3:.1f}",
                     f"{min(samples) * 1e3:.1f}..{max(samples) * 1e3:.1f}",
                     f"{pred * 1e3:.1f}" if pred else "-", f"{(t / pred - 1) * 100:+.0f}%" if pred else "-", wrong])
    print(f"\n# sum-allreduce float32, "
          f"{'netns, ' + str(args.rate_mbit) + ' Mbit/s links' if args.netns else 'loopback TCP'},"
          f" parameter servers: {args.servers}")
    C.print_table(["alg", "n", "size", "time(ms)", "min..max(ms)", "model(ms)", "measured vs model", "#wrong"], rows)
    C.write_result(args.json, {"meta": {"argv": sys.argv, "seconds": time.time() - t0, "rate_mbit": args.rate_mbit,
                                      "netns": args.netns, "servers": args.servers}, "results": results})
    if args.png and results:
        import plotting as P
        P.save(figure(results, args), args.png)
    return 1 if any(r["wrong"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
