"""One rank of one candidate in benchmarks/collectives.py: runs the timed loops and prints JSON records.

Launched by the driver (never by hand) as
    python benchmarks/collectives_worker.py CANDIDATE --ops allreduce,... --sizes 4,1048576 ...
Rank and size come from the candidate's own launcher: mpirun for mpi/mpi-tcp/hvd-mpi, horovodrun for
hvd-gloo, the driver's spawner (BENCH_* variables) for core/core-tcp/gloo, `pyhorovod run` or the spawner
for api and torch.

Method, the same for every candidate (nccl-tests style): for each op and size, one untimed call on
inputs whose result is exact (small integers in float32) is checked element by element; then `warmup`
calls; then `reps` timed batches, each = barrier + `iters` back-to-back calls, time = batch/iters per rank.
iters = iter_bytes/size clamped to [min_iters, max_iters], and cut so a batch takes about budget_s.
The driver takes the slowest rank of each batch (a collective is done when its last rank is).
allreduce is timed in place on zeros (in-place sums of real data would grow without bound over the
iterations); the zeros are checked afterwards too. The other ops are checked after the timed loop too.
Sizes as in nccl-tests: allreduce/broadcast the buffer, allgather the gathered output, alltoall one rank's
send buffer, reducescatter one rank's input (each rank keeps 1/n of it).
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402
from common import emit  # noqa: E402

TIMEOUT_S = 120.0


def _env_int(*names, default=None):
    for n in names:
        if os.environ.get(n, "") != "":
            return int(os.environ[n])
    if default is None:
        raise RuntimeError(f"none of {names} is set")
    return default


class CoreBackend:
    """pyhorovod._core.Communicator: the raw core, collectives on the calling thread, no engine."""

    def __init__(self, shm):
        from pyhorovod import _core
        self.c = _core
        self.rank = _env_int("BENCH_RANK")
        self.size = _env_int("BENCH_SIZE")
        port = _env_int("BENCH_STORE_PORT")
        secret = bytes.fromhex(os.environ["BENCH_SECRET"])
        self.server = _core.TcpStoreServer("127.0.0.1", port, secret) if self.rank == 0 else None
        o = _core.ConnectOptions()
        o.rank, o.size, o.local_rank, o.local_size = self.rank, self.size, self.rank, self.size
        o.store_host, o.store_port, o.secret = "127.0.0.1", port, secret
        o.bind_host, o.store_prefix, o.connect_timeout_s, o.shm_enable = "127.0.0.1", "bench", 60.0, shm
        if os.environ.get("PYHOROVOD_SHM_DIRECT_BYTES") and hasattr(o, "shm_direct_bytes"):
            o.shm_direct_bytes = int(os.environ["PYHOROVOD_SHM_DIRECT_BYTES"])  # core-2copy: 0
        self.comm = _core.Communicator(o)

    def tensor(self, a):
        return a

    def to_numpy(self, t):
        return t

    def allreduce(self, t):
        self.comm.allreduce(t, self.c.FLOAT32, self.c.SUM, TIMEOUT_S)

    def allgather(self, send, recv):
        self.comm.allgatherv(send, recv, [send.nbytes] * self.size, TIMEOUT_S)
        return recv

    def broadcast(self, t):
        self.comm.broadcast(t, 0, TIMEOUT_S)

    def alltoall(self, send, recv):
        part = [send.nbytes // self.size] * self.size
        self.comm.alltoallv(send, part, recv, part, TIMEOUT_S)
        return recv

    def reducescatter(self, send, recv):
        self.comm.reducescatter(send, recv, [recv.size] * self.size, self.c.FLOAT32, self.c.SUM, TIMEOUT_S)
        return recv

    def barrier(self):
        self.comm.barrier(TIMEOUT_S)

    def close(self):
        self.comm.close()
        if self.server is not None:
            self.server.close()


class ApiBackend:
    """pyhorovod's public framework-free API (engine, negotiation, fusion), synchronous calls."""

    def __init__(self):
        import pyhorovod as hvd
        self.h = hvd
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()

    def tensor(self, a):
        return a

    def to_numpy(self, t):
        return t

    def allreduce(self, t):
        self.h.allreduce_(t, op=self.h.Sum)

    def allgather(self, send, recv):
        return self.h.allgather(send)

    def broadcast(self, t):
        self.h.broadcast_(t, root_rank=0)

    def alltoall(self, send, recv):
        return self.h.alltoall(send)

    def reducescatter(self, send, recv):
        return self.h.reducescatter(send, op=self.h.Sum)

    def barrier(self):
        self.h.barrier()

    def close(self):
        self.h.shutdown()


class MpiBackend:
    """mpi4py over Open MPI (buffer interface, no pickling)."""

    def __init__(self):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def tensor(self, a):
        return a

    def to_numpy(self, t):
        return t

    def allreduce(self, t):
        self.comm.Allreduce(self.MPI.IN_PLACE, t, op=self.MPI.SUM)

    def allgather(self, send, recv):
        self.comm.Allgather(send, recv)
        return recv

    def broadcast(self, t):
        self.comm.Bcast(t, root=0)

    def alltoall(self, send, recv):
        self.comm.Alltoall(send, recv)
        return recv

    def reducescatter(self, send, recv):
        self.comm.Reduce_scatter_block(send, recv, op=self.MPI.SUM)
        return recv

    def barrier(self):
        self.comm.Barrier()

    def close(self):
        pass


class GlooBackend:
    """torch.distributed with the gloo backend (env:// rendezvous set by the driver)."""

    def __init__(self):
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)
        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", init_method="env://")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def tensor(self, a):
        return self.torch.from_numpy(a)

    def to_numpy(self, t):
        return t.numpy()

    def allreduce(self, t):
        self.dist.all_reduce(t)

    def allgather(self, send, recv):
        self.dist.all_gather_into_tensor(recv, send)
        return recv

    def broadcast(self, t):
        self.dist.broadcast(t, 0)

    def alltoall(self, send, recv):
        self.dist.all_to_all_single(recv, send)
        return recv

    def reducescatter(self, send, recv):
        self.dist.reduce_scatter_tensor(recv, send)
        return recv

    def barrier(self):
        self.dist.barrier()

    def close(self):
        self.dist.destroy_process_group()


class HorovodBackend:
    """Horovod 0.28.1's torch API (controller: whatever launched it, mpirun or horovodrun --gloo)."""

    def __init__(self, module="horovod.torch"):
        import importlib
        import torch
        hvd = importlib.import_module(module)
        torch.set_num_threads(1)
        self.torch, self.h = torch, hvd
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()

    def tensor(self, a):
        return self.torch.from_numpy(a)

    def to_numpy(self, t):
        return t.numpy()

    def allreduce(self, t):
        self.h.allreduce_(t, op=self.h.Sum)

    def allgather(self, send, recv):
        return self.h.allgather(send)

    def broadcast(self, t):
        self.h.broadcast_(t, root_rank=0)

    def alltoall(self, send, recv):
        return self.h.alltoall(send)

    def reducescatter(self, send, recv):
        return self.h.reducescatter(send, op=self.h.Sum)

    def barrier(self):
        self.h.barrier()

    def close(self):
        self.h.shutdown()


class TorchApiBackend(HorovodBackend):
    """pyhorovod.torch (the Horovod-compatible torch API), synchronous calls on CPU tensors."""

    def __init__(self):
        super().__init__(module="pyhorovod.torch")


def make_backend(name):
    if name in ("core", "core-tcp", "core-2copy"):
        return CoreBackend(shm=(name != "core-tcp"))
    if name in ("api", "api-tcp"):
        return ApiBackend()
    if name == "torch":
        return TorchApiBackend()
    if name in ("mpi", "mpi-tcp"):
        return MpiBackend()
    if name == "gloo":
        return GlooBackend()
    if name in ("hvd-mpi", "hvd-gloo"):
        return HorovodBackend()
    raise ValueError(f"unknown candidate {name!r}")


def iterations(nbytes, iter_bytes, lo, hi):
    return int(min(hi, max(lo, iter_bytes // max(nbytes, 1))))


def _blocks(op, n, r, per):
    """(rank r's send buffer, output length, exact expected output) for the block ops, per = count / n.
    Block q of rank r's input is b * (r+1) * (q+1) for alltoall (so rank r receives b*(q+1)*(r+1) from
    every q), b * (r+1) for the others (b: small integers, so every sum stays exact)."""
    b = (np.arange(per) % 7 + 1).astype(np.float32)
    if op == "allgather":
        return b * (r + 1), per * n, np.concatenate([b * (q + 1) for q in range(n)])
    if op == "alltoall":
        return (np.concatenate([b * ((r + 1) * (q + 1)) for q in range(n)]), per * n,
                np.concatenate([b * ((q + 1) * (r + 1)) for q in range(n)]))
    full = (np.arange(per * n) % 7 + 1).astype(np.float32)       # reducescatter: rank r keeps block r
    return full * (r + 1), per, full[r * per:(r + 1) * per] * (n * (n + 1) // 2)


def bench_one(be, op, nbytes, args):
    """Returns (actual bytes, per-batch seconds per call, #wrong elements)."""
    n, r = be.size, be.rank
    count = max(1, nbytes // 4)
    idx = np.arange(count, dtype=np.int64) % 7 + 1           # 1..7: every sum below stays exact
    iters = iterations(count * 4, args.iter_bytes, args.min_iters, args.max_iters)
    warmup = max(1, min(args.warmup, iters))
    wrong = 0
    if op == "allreduce":
        buf = (idx * (r + 1)).astype(np.float32)
        t = be.tensor(buf)
        be.allreduce(t)
        wrong += int(np.count_nonzero(be.to_numpy(t) != (idx * (n * (n + 1) // 2)).astype(np.float32)))
        buf[:] = 0
        call = lambda: be.allreduce(t)  # noqa: E731
        check = lambda: int(np.count_nonzero(be.to_numpy(t)))  # noqa: E731
        actual = count * 4
    elif op == "broadcast":
        want = (idx * 3).astype(np.float32)
        buf = want.copy() if r == 0 else np.zeros(count, dtype=np.float32)
        t = be.tensor(buf)
        call = lambda: be.broadcast(t)  # noqa: E731
        check = lambda: int(np.count_nonzero(be.to_numpy(t) != want))  # noqa: E731
        call()
        wrong += check()
        actual = count * 4
    elif op in ("allgather", "alltoall", "reducescatter"):
        per = max(1, count // n)
        send, out_len, want = _blocks(op, n, r, per)
        recv = be.tensor(np.empty(out_len, dtype=np.float32))
        send = be.tensor(send)
        fn, holder = getattr(be, op), {}
        call = lambda: holder.__setitem__("out", fn(send, recv))  # noqa: E731
        check = lambda: int(np.count_nonzero(be.to_numpy(holder["out"]).reshape(-1) != want))  # noqa: E731
        call()
        wrong += check()
        actual = per * n * 4
    else:
        raise ValueError(op)
    t0 = time.perf_counter()
    for _ in range(warmup):
        call()
    # Agree on the batch length: the mean warm-up time over ranks (an allreduce of this very candidate),
    # so that a slow candidate or a slow machine state still finishes a batch in about --budget-s.
    est = np.array([(time.perf_counter() - t0) / warmup], dtype=np.float32)
    et = be.tensor(est)
    be.allreduce(et)
    per_call = float(be.to_numpy(et)[0]) / n
    if per_call > 0:
        iters = int(min(iters, max(args.min_iters, args.budget_s / per_call)))
    times = []
    for _ in range(args.reps):
        be.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        times.append((time.perf_counter() - t0) / iters)
    wrong += check()
    return actual, iters, times, wrong


def main():
    p = C.arg_parser(__doc__)
    p.add_argument("candidate")
    p.add_argument("--ops", required=True)
    p.add_argument("--sizes", required=True, help="comma-separated byte counts")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iter-bytes", type=int, default=64 << 20)
    p.add_argument("--min-iters", type=int, default=3)
    p.add_argument("--max-iters", type=int, default=200)
    p.add_argument("--budget-s", type=float, default=0.5, help="target seconds per timed batch")
    p.add_argument("--tag", default="")
    args = p.parse_args()
    be = make_backend(args.candidate)
    for op in args.ops.split(","):
        for s in (int(x) for x in args.sizes.split(",")):
            actual, iters, times, wrong = bench_one(be, op, s, args)
            emit({"cand": args.candidate, "op": op, "req_bytes": s, "bytes": actual, "n": be.size,
                  "rank": be.rank, "iters": iters, "times": times, "wrong": wrong, "tag": args.tag})
    be.barrier()
    be.close()


if __name__ == "__main__":
    main()
