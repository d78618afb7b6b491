"""Peak memory (RSS high-water mark) of one large allreduce per rank (the target: a 4-rank 256 MiB
allreduce must peak at <= 2x the tensor size per rank).

    python benchmarks/perf_memory.py --np 4 --mib 256            # raw core and public API, shm on and off

For each candidate (core, core-tcp: pyhorovod._core.Communicator; api, api-tcp: pyhorovod.allreduce_
through the engine, launched by `python -m pyhorovod.run`), every rank records ru_maxrss before the
tensor exists (the interpreter, numpy, the extension, connections), after filling the tensor, and after
two allreduces; the report gives the peak and the peak minus the baseline, both / tensor size. The
result is checked (small integers: exact sums).
"""
import json
import os
import resource
import secrets
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common as C  # noqa: E402


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(cand, mib):
    import numpy as np
    base = rss_mib()
    count = (mib << 20) // 4  # a multiple of 4096 (whole MiB)
    if cand.startswith("core"):
        from pyhorovod import _core
        rank, size = int(os.environ["BENCH_RANK"]), int(os.environ["BENCH_SIZE"])
        port, secret = int(os.environ["BENCH_PORT"]), bytes.fromhex(os.environ["BENCH_SECRET"])
        server = _core.TcpStoreServer("127.0.0.1", port, secret) if rank == 0 else None
        o = _core.ConnectOptions()
        o.rank, o.size, o.local_rank, o.local_size = rank, size, rank, size
        o.store_host, o.store_port, o.secret, o.shm_enable = "127.0.0.1", port, secret, cand == "core"
        comm = _core.Communicator(o)
        run = lambda a: comm.allreduce(a, _core.FLOAT32, _core.SUM, 300.0)  # noqa: E731
        done = lambda: (comm.barrier(60.0), comm.close(), server and server.close())  # noqa: E731
    else:
        import pyhorovod as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        run = lambda a: hvd.allreduce_(a, op=hvd.Sum)  # noqa: E731
        done = hvd.shutdown
    base = rss_mib()
    # Filled and checked in 4096-element rows, so that no temporary of the tensor's size exists.
    pattern = (np.arange(4096) % 5).astype(np.float32)
    a = np.empty(count, dtype=np.float32)
    rows = a.reshape(-1, 4096)
    rows[:] = pattern
    filled = rss_mib()
    run(a)
    ok = all(np.array_equal(rows[i], pattern * size) for i in range(0, rows.shape[0], 997))
    rows[:] = 1
    run(a)
    ok = ok and all(bool((rows[i:i + 256] == size).all()) for i in range(0, rows.shape[0], 256))
    peak = rss_mib()
    done()
    print("@@MEM " + json.dumps({"cand": cand, "rank": rank, "base": base, "filled": filled, "peak": peak,
                                 "ok": ok}), flush=True)


def launch(cand, n, mib, timeout):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    me = [sys.executable, os.path.abspath(__file__), "--worker", cand, "--mib", str(mib)]
    if cand.startswith("api"):
        if cand == "api-tcp":
            env["PYHOROVOD_SHM"] = "0"
        procs = [subprocess.Popen([sys.executable, "-m", "pyhorovod.run", "-np", str(n)] + me, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        common = {"BENCH_SIZE": str(n), "BENCH_PORT": str(port), "BENCH_SECRET": secrets.token_hex(16)}
        procs = [subprocess.Popen(me, env=dict(env, BENCH_RANK=str(r), **common), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for r in range(n)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit(f"{cand}: timed out")
    recs = [json.loads(ln.split("@@MEM ", 1)[1]) for o in outs for ln in o.splitlines() if "@@MEM " in ln]
    if len(recs) != n:
        raise SystemExit(f"{cand}: expected {n} records\n" + "\n".join(o[-3000:] for o in outs))
    return recs


def main():
    p = C.arg_parser(__doc__)
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--mib", type=int, default=256)
    cands = ("core", "core-tcp", "api", "api-tcp")
    p.add_argument("--cands", default=",".join(cands), type=C.choice_list(cands), help=C.choices_help(cands))
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--worker", default="")
    args = p.parse_args()
    if args.worker:
        return worker(args.worker, args.mib)
    print(f"# allreduce of {args.mib} MiB float32 at n={args.np}: RSS high-water mark per rank (MiB)")
    print(f"{'cand':8s} {'rank':>4} {'before':>8} {'filled':>8} {'peak':>8} {'peak/T':>7} {'(peak-before)/T':>16} ok")
    for cand in args.cands.split(","):
        for r in sorted(launch(cand, args.np, args.mib, args.timeout), key=lambda x: x["rank"]):
            print(f"{cand:8s} {r['rank']:4d} {r['base']:8.0f} {r['filled']:8.0f} {r['peak']:8.0f}"
                  f" {r['peak'] / args.mib:7.2f} {(r['peak'] - r['base']) / args.mib:16.2f} {r['ok']}")


if __name__ == "__main__":
    main()
