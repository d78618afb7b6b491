"""What the engine costs on top of the raw core.

1. Latency of a synchronous allreduce of one float32: through the public API (pyhorovod.allreduce: the
   engine's negotiation round + the collective) against the raw core (_core.Communicator.allreduce on the
   calling thread, no engine).
2. 100 tensors of 4 KiB submitted together (allreduce_async, then synchronize all): fused (default
   HOROVOD_FUSION_THRESHOLD) against unfused (threshold 0).

This machine flips between fast and slow states (shared/anchors.md), so each rank process runs the
candidates interleaved round by round (A B A B ...) and we report medians over rounds and the ratios of
the medians, never one absolute time. The ranks are spawned in this process's session on purpose: with
the kernel's scheduler autogroups, a rank per session (as tests/mp.py does, for clean kills) makes every
cross-process wake-up several times slower and would measure the scheduler, not the engine.

Latency columns: raw (Communicator.allreduce), direct (_core.Engine.enqueue + wait), sync
(_core.Engine.run_sync), api_async (allreduce_async + synchronize), api (pyhorovod.allreduce), api_
(pyhorovod.allreduce_, in place: like mpi4py's Allreduce, no new array per call), and
mpi: Open MPI's shared memory (mpi4py Allreduce of the same 4 B under `mpirun --mca pml ob1 --mca btl
self,vader --oversubscribe`, so at 4 ranks on 2 cores it shares the cores as ours do: the CPU floor of the
oversubscribed cells). Each with the process's CPU time per call (caller + engine thread). With mpi,
every round is one launch of ours then one of Open MPI's (interleaved, same iterations), and the ratios
to mpi are the medians of the per-round ratios. --tensors 0 skips the fusion burst; --no-mpi the column.

    python benchmarks/engine_latency.py [--sizes 1 2 4] [--rounds 15] [--iters 200] [--tensors 0] [--no-mpi]
                                        [--json out.json]
"""
import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks"), os.path.join(ROOT, "tests")]
import common as C  # noqa: E402


def _raw_communicator(prefix):
    from pyhorovod import _core
    from mp import connect_options_from_env   # tests/mp.py: the rank's options from the launcher's variables
    o = connect_options_from_env(prefix)
    o.connect_timeout_s = 60
    return _core.Communicator(o)


def rank_body(rounds, iters, ntensors, tensor_bytes):
    """One rank: interleaved rounds of (raw, engine) latency and (fused, unfused) throughput."""
    import numpy as np
    import pyhorovod as hvd
    from pyhorovod import _core, basics

    comm = _raw_communicator("bench_raw")
    hvd.init()
    one = np.ones(1, np.float32)
    tensors = [np.full(tensor_bytes // 4, hvd.rank() + 1, np.float32) for _ in range(ntensors)]
    n = hvd.size()

    def timed(body):
        """(wall seconds, CPU seconds of the whole process: caller + engine thread) per call."""
        t, c = time.perf_counter(), time.process_time()
        body()
        return (time.perf_counter() - t) / iters, (time.process_time() - c) / iters

    def raw_body():
        buf = one.copy()
        for _ in range(iters):
            comm.allreduce(buf, _core.FLOAT32, _core.SUM, 30.0)

    def api_body():  # the public API: synchronous pyhorovod.allreduce
        for _ in range(iters):
            hvd.allreduce(one, op=hvd.Sum, name="lat")

    zero = np.zeros(1, np.float32)   # a sum of zeros stays zero however many calls

    def api_inplace_body():  # pyhorovod.allreduce_ into the caller's array, as mpi4py's Allreduce writes
        for _ in range(iters):
            hvd.allreduce_(zero, op=hvd.Sum, name="lat_")

    def api_async_body():  # the handle path (what allreduce did before the synchronous fast path)
        for _ in range(iters):
            hvd.synchronize(hvd.allreduce_async(one, op=hvd.Sum, name="lat"))

    out = np.empty_like(one)
    ptrs = (one.__array_interface__["data"][0], out.__array_interface__["data"][0])

    def direct_body():  # _core.Engine.enqueue + wait, no Python layers
        e = basics.engine()
        for _ in range(iters):
            e.wait(e.enqueue(_core.ALLREDUCE, "d", _core.FLOAT32, [1], ptrs[0], ptrs[1]))

    def sync_body():  # _core.Engine.run_sync, no Python layers
        e = basics.engine()
        for _ in range(iters):
            e.run_sync(_core.ALLREDUCE, "s", _core.FLOAT32, [1], one, out, 0, 1.0, 1.0, 0, 0, 0.0)

    has_sync = hasattr(_core.Engine, "run_sync")
    latency = {"raw": raw_body, "api": api_body, "api_": api_inplace_body, "api_async": api_async_body,
               "direct": direct_body}
    if has_sync:
        latency["sync"] = sync_body

    def burst(tag):
        reps = max(1, iters // 20)
        t = time.perf_counter()
        for _ in range(reps):
            hs = [hvd.allreduce_async(x, op=hvd.Sum, name=f"{tag}.{i}") for i, x in enumerate(tensors)]
            outs = [hvd.synchronize(h) for h in hs]
        dt = (time.perf_counter() - t) / reps
        assert outs[-1][0] == n * (n + 1) / 2, outs[-1][0]
        return dt

    # The fusion threshold is fixed at init, so every round runs two engine generations (re-init is
    # outside the timed parts): default threshold (raw, API, fused burst), then threshold 0 (unfused).
    rec = {k: [] for k in latency}
    rec.update({k + "_cpu": [] for k in latency})
    if ntensors:
        rec.update(fused=[], unfused=[])
    hvd.shutdown()
    for _ in range(rounds):
        os.environ.pop("HOROVOD_FUSION_THRESHOLD", None)
        hvd.init()
        for body in latency.values():
            timed(body)  # warm-up
        for k, body in latency.items():
            wall, cpu = timed(body)
            rec[k].append(wall)
            rec[k + "_cpu"].append(cpu)
        if not ntensors:
            hvd.shutdown()
            continue
        burst("warm")
        rec["fused"].append(burst("b"))
        hvd.shutdown()
        os.environ["HOROVOD_FUSION_THRESHOLD"] = "0"
        hvd.init()
        burst("warm")
        rec["unfused"].append(burst("b"))
        hvd.shutdown()
    comm.close()
    return rec


def mpi_body(iters):
    """One Open MPI rank (under mpirun): one timed loop of `iters` 4 B Allreduces after a warm-up loop."""
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    x, y = np.ones(1, np.float32), np.empty(1, np.float32)
    for _ in range(iters):
        comm.Allreduce(x, y, op=MPI.SUM)
    comm.Barrier()
    t, c = time.perf_counter(), time.process_time()
    for _ in range(iters):
        comm.Allreduce(x, y, op=MPI.SUM)
    wall, cpu = (time.perf_counter() - t) / iters, (time.process_time() - c) / iters
    assert y[0] == comm.size, y
    if comm.rank == 0:
        print("@@RESULT " + json.dumps({"mpi": [wall], "mpi_cpu": [cpu]}), flush=True)


def mpi_round(n, args, timeout=300):
    """One launch of mpi_body on n ranks; rank 0's record."""
    argv = C.mpirun_prefix(n) + ["--mca", "pml", "ob1", "--mca", "btl", "self,vader", sys.executable,
                                 os.path.abspath(__file__), "--mpi-worker", "--iters", str(args.iters)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYHOROVOD_", "HOROVOD_"))}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("@@RESULT "))
    return json.loads(line[len("@@RESULT "):])


def interleaved(n, args):
    """args.rounds rounds of (ours, Open MPI), one launch each; the records merged round by round."""
    rec = {}
    one = argparse.Namespace(**{**vars(args), "rounds": 1})
    for _ in range(args.rounds):
        for part in (spawn(n, one), mpi_round(n, args)):
            for k, v in part.items():
                rec.setdefault(k, []).extend(v)
    return rec


def spawn(n, args, timeout=600):
    """Runs n worker processes (same session) around a rendezvous store; returns rank 0's record."""
    from pyhorovod import _core
    secret = secrets.token_hex(16)
    server = _core.TcpStoreServer("127.0.0.1", 0, secret.encode())
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--rounds", str(args.rounds), "--iters",
            str(args.iters), "--tensors", str(args.tensors), "--tensor-bytes", str(args.tensor_bytes)]
    procs = []
    try:
        for r in range(n):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PYHOROVOD_", "HOROVOD_", "OMPI_"))}
            env.update(PYHOROVOD_RANK=str(r), PYHOROVOD_SIZE=str(n), PYHOROVOD_LOCAL_RANK=str(r),
                       PYHOROVOD_LOCAL_SIZE=str(n), PYHOROVOD_STORE_ADDR="127.0.0.1",
                       PYHOROVOD_STORE_PORT=str(server.port), PYHOROVOD_SECRET=secret, OMP_NUM_THREADS="1",
                       PYTHONPATH=ROOT)
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
        deadline = time.monotonic() + timeout
        outs = []
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if p.returncode != 0:
                raise RuntimeError(f"worker exited with {p.returncode}")
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        server.close()
    line = next(l for l in outs[0].splitlines() if l.startswith("@@RESULT "))
    return json.loads(line[len("@@RESULT "):])


def main():
    ap = C.arg_parser(__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--tensors", type=int, default=100)
    ap.add_argument("--tensor-bytes", type=int, default=4096)
    ap.add_argument("--json", default="")
    ap.add_argument("--no-mpi", action="store_true", help="skip the Open MPI column")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mpi_worker:
        mpi_body(args.iters)
        return
    if args.worker:
        rec = rank_body(args.rounds, args.iters, args.tensors, args.tensor_bytes)
        if int(os.environ["PYHOROVOD_RANK"]) == 0:
            print("@@RESULT " + json.dumps(rec), flush=True)
        return

    use_mpi = not args.no_mpi and shutil.which("mpirun") is not None
    if use_mpi:
        try:
            import mpi4py  # noqa: F401 -- only whether it is there (importing mpi4py.MPI would init MPI)
        except ImportError:
            use_mpi = False
    report = {}
    for n in args.sizes:
        rec = interleaved(n, args) if use_mpi and n > 1 else spawn(n, args)
        med = {k: statistics.median(v) for k, v in rec.items()}
        report[n] = {"medians_s": med, "rounds": rec}
        cols = [k for k in ("raw", "direct", "sync", "api_async", "api", "api_", "mpi") if k in med]
        print(f"n={n}: 1-float allreduce, median us per call (wall / process CPU), ratio to raw core"
              + (", ratio to Open MPI (median of per-round ratios):" if "mpi" in med else ":"))
        for k in cols:
            line = f"    {k:10s} {med[k] * 1e6:8.1f} / {med[k + '_cpu'] * 1e6:8.1f}   {med[k] / med['raw']:5.2f}x"
            if "mpi" in med:
                line += f"   {statistics.median(a / b for a, b in zip(rec[k], rec['mpi'])):6.2f}x mpi"
            print(line)
        if "fused" not in med:
            continue
        mb = args.tensors * args.tensor_bytes / 1e6
        print(f"n={n}: {args.tensors} x {args.tensor_bytes} B burst  fused {med['fused'] * 1e3:8.2f} ms"
              f" ({mb / med['fused']:.0f} MB/s)   unfused {med['unfused'] * 1e3:8.2f} ms"
              f" ({mb / med['unfused']:.0f} MB/s)   speed-up {med['unfused'] / med['fused']:.1f}x")
    if args.json:
        C.write_result(args.json, {str(n): v for n, v in report.items()})


if __name__ == "__main__":
    main()
