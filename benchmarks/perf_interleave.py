"""Paired A/B timing of collective candidates inside ONE set of processes (a development tool
for tuning the latency and bandwidth paths).

    python benchmarks/perf_interleave.py --np 2 --sizes 4,1M,64M --cands "core core-tcp mpi gloo"
    python benchmarks/perf_interleave.py --np 4 --op alltoall --sizes 16M,64M --cands "core mpi"
    python benchmarks/perf_interleave.py --np 4 --sizes 64M --cands "core-tcp mpi" --mpi-tcp  # MPI over TCP
    python benchmarks/perf_interleave.py --np 2 --sizes 64M --cands "core core:seg=256K core:seg=1M,win=2"

Why: this machine flips between fast and slow states every few seconds (shared/anchors.md), and other
jobs share its two cores. benchmarks/collectives.py interleaves whole launches; this script goes further:
mpirun starts N processes once, each process opens every candidate side by side (our raw core with
different options, mpi4py's COMM_WORLD, a torch gloo group), and the candidates take turns batch by
batch (A B C A B C ...). A state flip then hits every candidate alike, and the paired per-batch ratio
survives it. Per batch we record the slowest rank's wall time per call and the CPU time (user+sys,
getrusage) per call of every rank, which does not depend on how the load shares the cores.

Candidates: core (shared memory on), core-tcp (off), api (the public numpy API, under mpirun only), mpi
(Open MPI; TCP only with --mpi-tcp), gloo (allreduce only); api-new and mpi-new time the out-of-place
allreduce and broadcast (a new output, the input kept) and are api and mpi for the other ops. --op picks
the collective (allreduce by default); sizes as in collectives.py: the buffer for allreduce and
broadcast, the gathered output for allgather, one rank's input for alltoall and reducescatter.
--align-2m starts every buffer on a 2 MiB boundary (see on_huge_pages).
A core candidate may carry options after a colon: seg=BYTES (segment size), win=N (segments in flight),
small=BYTES (small-message threshold), spin=US (shm spin before sleeping), yield=-1|0|1, ring=BYTES (shm
ring size), zerocopy=0|1 (reduce straight from the shm ring), direct=BYTES (single copies from this size
up; 0: off), alg=auto|ring|small, lockstep=1 (a barrier before every call, so that no call overlaps the
previous one on another rank: the per-call latency, as a negotiated call through the engine sees it, not the
throughput of back-to-back calls), env.NAME=VALUE (an environment variable set while this communicator is
built), e.g. core-tcp:seg=1M,win=2.
"""
import json
import os
import resource
import secrets
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import collectives_worker as W  # noqa: E402
import common as C  # noqa: E402
TIMEOUT_S = 120.0


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    num = t.rstrip("KMG")
    return int(num) * units[t[len(num):]]


def fmt_size(n):
    for u, d in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= d and n % d == 0:
            return f"{n // d}{u}"
    return f"{n}B"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def sys_s():
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


# ------------------------------------------------------------------------------------------ worker side

class Core(W.CoreBackend):  # allgather, alltoall, broadcast, reducescatter: as collectives.py calls them
    def __init__(self, name, rank, size, port, secret, prefix):
        from pyhorovod import _core
        self.c, self.rank, self.size = _core, rank, size
        base, _, opts = name.partition(":")
        o = _core.ConnectOptions()
        o.rank, o.size, o.local_rank, o.local_size = rank, size, rank, size
        o.store_host, o.store_port, o.secret = "127.0.0.1", port, secret
        o.bind_host, o.store_prefix, o.connect_timeout_s = "127.0.0.1", prefix, 60.0
        o.shm_enable = base == "core"
        t = _core.Tuning()
        self.alg = "auto"
        self.lockstep = False
        saved = dict(os.environ)
        for kv in filter(None, opts.split(",")):
            k, v = kv.split("=")
            if k.startswith("env."):  # a variable read while the communicator is built (experiment knobs)
                os.environ[k[4:]] = v
            elif k == "seg":
                t.segment_bytes = parse_size(v)
            elif k == "win":
                t.max_segments_in_flight = int(v)
            elif k == "small":
                t.small_threshold_bytes = parse_size(v)
            elif k == "spin":
                o.shm_spin_us = int(v)
            elif k == "yield":
                o.shm_spin_yield = int(v)
            elif k == "alg":
                self.alg = v
            elif k == "lockstep":
                self.lockstep = v != "0"
            elif k == "ring":
                o.shm_ring_bytes = parse_size(v)
            elif k == "zerocopy":
                o.shm_zero_copy = v != "0"
            elif k == "direct":
                o.shm_direct_bytes = parse_size(v)
            else:
                raise ValueError(f"unknown core option {k!r}")
        o.tuning = t
        self.comm = _core.Communicator(o)
        os.environ.clear()
        os.environ.update(saved)

    def allreduce(self, a):
        self.comm.allreduce(a, self.c.FLOAT32, self.c.SUM, TIMEOUT_S, self.alg)

    def barrier(self):
        self.comm.barrier(TIMEOUT_S)


class Mpi(W.MpiBackend):
    pass


class ApiNew(W.ApiBackend):
    """api-new: the API's out-of-place allreduce and broadcast, the forms most Horovod scripts call; each
    returns a new array and leaves its input as it was (the other ops are out of place already)."""
    out_of_place = True

    def allreduce_new(self, a, recv):
        return self.h.allreduce(a, op=self.h.Sum)

    def broadcast_new(self, a, recv):
        return self.h.broadcast(a, root_rank=0)


class MpiNew(Mpi):
    """mpi-new: what an mpi4py user writes for the same: Allreduce into a separate receive buffer; a
    broadcast that keeps its input copies it into the receive buffer on the root first (MPI's Bcast has
    no out-of-place form)."""
    out_of_place = True

    def allreduce_new(self, a, recv):
        self.comm.Allreduce(a, recv, op=self.MPI.SUM)
        return recv

    def broadcast_new(self, a, recv):
        if self.rank == 0:
            recv[:] = a
        self.comm.Bcast(recv, root=0)
        return recv


class Gloo:
    def __init__(self, rank, size, port):
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)
        self.torch, self.dist = torch, dist
        store = dist.TCPStore("127.0.0.1", port, size, rank == 0, timeout=__import__("datetime").timedelta(seconds=60))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=size)
        self.views = {}

    def allreduce(self, a):
        t = self.views.get(id(a))
        if t is None:
            t = self.views[id(a)] = self.torch.from_numpy(a)
        self.dist.all_reduce(t)

    def barrier(self):
        self.dist.barrier()


HUGE_PAGE = 2 << 20


def on_huge_pages(a):
    """A copy of a that starts on a 2 MiB boundary. numpy asks for transparent huge pages for its large
    arrays, but malloc's mapping starts anywhere, so up to 2 MiB at each end of the array stays on 4 KiB
    pages, and cross-memory copies of those run at a third of the speed (RESULTS.md): which candidate got
    the luckier addresses then showed in the ratios. --align-2m gives every candidate whole huge pages."""
    import numpy as np
    raw = np.empty(a.nbytes + HUGE_PAGE, np.uint8)
    skip = -raw.ctypes.data % HUGE_PAGE
    out = raw[skip:skip + a.nbytes].view(a.dtype)
    out[:] = a
    return out


def make_call(o, op, nbytes, rank, size, align=False):
    """(call, check) for candidate o: call() runs the op once on buffers made here; check() counts the
    wrong elements of the output (an allreduce sums in place, so its check expects the zeros it is left
    with after the first call's check). align: every buffer starts on a 2 MiB boundary."""
    call, check = _make_call(o, op, nbytes, rank, size, align)
    if getattr(o, "lockstep", False):
        return (lambda: (o.barrier(), call())), check
    return call, check


def _make_call(o, op, nbytes, rank, size, align):
    import numpy as np
    place = on_huge_pages if align else (lambda a: a)
    count = max(1, nbytes // 4)
    base = (np.arange(count) % 7 + 1).astype(np.float32)
    if op in ("allreduce", "broadcast") and getattr(o, "out_of_place", False):
        a = place(base * (rank + 1) if op == "allreduce" else base * (3 if rank == 0 else 5))
        keep = a.copy()
        want = base * (size * (size + 1) // 2) if op == "allreduce" else base * 3
        fn, recv, got = getattr(o, op + "_new"), place(np.empty_like(a)), [None]

        def call():
            got[0] = fn(a, recv)
        return call, (lambda: int(np.count_nonzero(got[0] != want)) + int(np.count_nonzero(a != keep)))
    if op == "allreduce":
        a = place(base * (rank + 1))
        state = {"want": base * (size * (size + 1) // 2)}

        def check():
            bad = int(np.count_nonzero(a != state["want"]))
            a[:] = 0   # zeros stay zeros whatever the number of calls
            state["want"] = np.zeros_like(a)
            return bad
        return (lambda: o.allreduce(a)), check
    if op == "broadcast":
        want = base * 3
        a = place(want.copy() if rank == 0 else np.zeros(count, np.float32))
        return (lambda: o.broadcast(a)), (lambda: int(np.count_nonzero(a != want)))
    per = max(1, count // size)
    send, out_len, want = W._blocks(op, size, rank, per)
    send, recv = place(send), place(np.empty(out_len, np.float32))
    fn = getattr(o, op)
    got = [recv]   # the api candidate returns an output the engine allocated; the others fill recv

    def call():
        got[0] = fn(send, recv)

    return call, (lambda: int(np.count_nonzero(got[0] != want)))


def worker(args):
    if "PERF_RANK" in os.environ:  # --launcher spawn: no MPI in these processes
        world = None
        rank, size = int(os.environ["PERF_RANK"]), int(os.environ["PERF_SIZE"])
    else:
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        rank, size = world.Get_rank(), world.Get_size()
    port, gport = int(os.environ["PERF_PORT"]), int(os.environ["PERF_GLOO_PORT"])
    secret = bytes.fromhex(os.environ["PERF_SECRET"])
    from pyhorovod import _core
    server = _core.TcpStoreServer("127.0.0.1", port, secret) if rank == 0 else None
    if world is not None:
        world.Barrier()
    cands = args.cands.split()
    objs = {}
    for i, c in enumerate(cands):
        if c.startswith("core"):
            objs[c] = Core(c, rank, size, port, secret, f"p{i}")
        elif c == "mpi":
            objs[c] = Mpi()
        elif c == "api":   # the public numpy API (engine, negotiation, engine-allocated outputs)
            objs[c] = W.ApiBackend()
        elif c == "api-new":
            objs[c] = ApiNew()
        elif c == "mpi-new":
            objs[c] = MpiNew()
        elif c == "gloo":
            objs[c] = Gloo(rank, size, gport)
        else:
            raise ValueError(c)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    recs = []
    for nbytes in sizes:
        calls, checks = {}, {}
        for c, o in objs.items():  # correctness first (exact sums of small integers)
            calls[c], checks[c] = make_call(o, args.op, nbytes, rank, size, args.align_2m)
            calls[c]()
            bad = checks[c]()
            if bad:
                raise SystemExit(f"rank {rank}: {c} {args.op} {nbytes} B: {bad} wrong elements")
            for _ in range(args.warmup):
                calls[c]()
        iters = int(min(args.max_iters, max(args.min_iters, args.iter_bytes // max(nbytes, 4))))
        for rnd in range(args.rounds):
            order = cands[rnd % len(cands):] + cands[:rnd % len(cands)]
            for c in order:
                o, call = objs[c], calls[c]
                o.barrier()
                s0, c0, t0 = sys_s(), cpu_s(), time.perf_counter()
                for _ in range(iters):
                    call()
                t1, c1, s1 = time.perf_counter(), cpu_s(), sys_s()
                recs.append((c, nbytes, rnd, (t1 - t0) / iters, (c1 - c0) / iters, (s1 - s0) / iters))
        for c in cands:
            bad = checks[c]()
            if bad:
                raise SystemExit(f"rank {rank}: {c} {args.op} {nbytes} B: {bad} wrong elements after the timing")
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if world is None:
        print("@@RANK " + json.dumps([recs, peak_kb]), flush=True)
        allr = None
    else:
        allr = world.gather((recs, peak_kb), root=0)
    for o in objs.values():
        o.barrier()
    for o in objs.values():
        if isinstance(o, Core):
            o.comm.close()
    if rank == 0:
        if allr is not None:
            print("@@PERF " + json.dumps(allr), flush=True)
        server.close()


# ------------------------------------------------------------------------------------------ driver side

def report(allr, n, label, op):
    # key (cand, bytes, round) -> max wall over ranks, mean cpu over ranks
    by = {}
    for recs, _ in allr:
        for c, b, r, wall, cpu, sys_ in recs:
            d = by.setdefault((c, b, r), [[], [], []])
            d[0].append(wall)
            d[1].append(cpu)
            d[2].append(sys_)
    cands, sizes = [], []
    for (c, b, _r) in by:
        if c not in cands:
            cands.append(c)
        if b not in sizes:
            sizes.append(b)
    sizes.sort()
    print(f"\n# {op} float32, n={n} {label}: median over rounds of (slowest rank wall per call);"
          f" cpu = mean over ranks of user+sys per call (sys: the kernel's part);"
          f" ratio = median over rounds of wall(cand)/wall({cands[0]})")
    hdr = (f"{'size':>6} {'cand':28s} {'wall(us)':>10} {'busbw(GB/s)':>11} {'cpu(us)':>10} {'sys(us)':>9}"
           f" {'ratio':>7} {'min..max(us)':>18}")
    print(hdr)
    out = []
    for b in sizes:
        rounds = sorted({r for (c, bb, r) in by if bb == b})
        ref = {r: max(by[(cands[0], b, r)][0]) for r in rounds if (cands[0], b, r) in by}
        for c in cands:
            walls = {r: max(by[(c, b, r)][0]) for r in rounds if (c, b, r) in by}
            cpus = [statistics.fmean(by[(c, b, r)][1]) for r in rounds if (c, b, r) in by]
            syss = [statistics.fmean(by[(c, b, r)][2]) for r in rounds if (c, b, r) in by]
            w = statistics.median(walls.values())
            ratio = statistics.median(walls[r] / ref[r] for r in walls if r in ref)
            busbw = b / w / 1e9 * C.bus_factor(op, n)
            print(f"{fmt_size(b):>6} {c:28s} {w * 1e6:10.1f} {busbw:11.3f} {statistics.median(cpus) * 1e6:10.1f}"
                  f" {statistics.median(syss) * 1e6:9.1f}"
                  f" {ratio:7.3f} {min(walls.values()) * 1e6:8.0f}..{max(walls.values()) * 1e6:<8.0f}")
            out.append({"n": n, "op": op, "cand": c, "bytes": b, "wall_s": w, "busbw": busbw,
                        "cpu_s": statistics.median(cpus), "sys_s": statistics.median(syss),
                        "ratio_to_first": ratio, "rounds": len(walls)})
    print("peak RSS per rank (MiB): " + ", ".join(f"{kb / 1024:.0f}" for _, kb in allr))
    return out


def main():
    p = C.arg_parser(__doc__)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--sizes", default="4,1M,64M")
    p.add_argument("--op", default="allreduce", choices=("allreduce", "allgather", "alltoall", "broadcast",
                                                          "reducescatter"))
    p.add_argument("--cands", default="core core-tcp mpi gloo", help="space-separated (quote the list)")
    p.add_argument("--mpi-tcp", action="store_true", help="Open MPI over TCP only (pml ob1, btl self,tcp)")
    p.add_argument("--align-2m", action="store_true",
                   help="every candidate's buffers start on a 2 MiB boundary (whole transparent huge pages)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iter-bytes", type=parse_size, default=parse_size("256M"))
    p.add_argument("--min-iters", type=int, default=3)
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--json", default="")
    p.add_argument("--launcher", choices=("mpirun", "spawn"), default="mpirun",
                   help="mpirun: all ranks in mpirun's session; spawn: one session per rank (no mpi candidate)")
    p.add_argument("--worker", action="store_true")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    env = dict(os.environ, PERF_PORT=str(free_port()), PERF_GLOO_PORT=str(free_port()),
               PERF_SECRET=secrets.token_hex(16))
    env["PYTHONPATH"] = ROOT + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # numpy's OpenBLAS threads busy-wait after any BLAS call and showed up as ~8% of a rank's samples
    # (perf record); none of the candidates needs them.
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    me = [sys.executable, os.path.abspath(__file__), "--worker"] + [a for a in sys.argv[1:] if a != "--mpi-tcp"]
    if "--cands" not in sys.argv:
        me += ["--cands", args.cands]
    t0 = time.time()
    if args.launcher == "spawn":
        # One session per rank, as pyhorovod.run and tests/mp.py start them (each its own scheduler
        # autogroup); no mpi candidate then.
        procs = [subprocess.Popen(me, env=dict(env, PERF_RANK=str(r), PERF_SIZE=str(args.np)), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
                 for r in range(args.np)]
        outs, rc = [], 0
        for pr in procs:
            try:
                outs.append(pr.communicate(timeout=args.timeout)[0])
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise SystemExit("spawned ranks timed out")
            rc = rc or pr.returncode
        ranks = [json.loads(ln[len("@@RANK "):]) for o in outs for ln in o.splitlines() if ln.startswith("@@RANK ")]
        if rc or len(ranks) != args.np:
            sys.stdout.write("".join(o[-3000:] for o in outs))
            raise SystemExit(f"spawned ranks failed ({rc})")
        allr = ranks
    else:
        argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(args.np),
                "-x", "OPENBLAS_NUM_THREADS", "-x", "PYTHONPATH"]
        if args.mpi_tcp:
            argv += ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp"]
        r = subprocess.run(argv + me, env=env, capture_output=True, text=True, timeout=args.timeout)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("@@PERF ")]
        if r.returncode != 0 or not line:
            sys.stdout.write(r.stdout[-4000:] + r.stderr[-4000:])
            raise SystemExit(f"mpirun failed with {r.returncode}")
        allr = json.loads(line[0][len("@@PERF "):])
    label = "(mpi = Open MPI TCP only)" if args.mpi_tcp else "(mpi = Open MPI default: shared memory)"
    if args.launcher == "spawn":
        label = "(ranks spawned, one session each)"
    out = report(allr, args.np, label, args.op)
    print(f"({time.time() - t0:.0f} s; load average {os.getloadavg()[0]:.1f})")
    if args.json:
        C.write_result(args.json, {"argv": sys.argv, "results": out})


if __name__ == "__main__":
    main()
