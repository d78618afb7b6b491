"""A 2-rank loop of 256 KiB ring allgathers (single copies off) for about 3 s, then plain copies of the same
buffers: run under perf to see where a slow launch spends its time.

    mpirun -np 2 perf record -e cpu-clock --call-graph dwarf -o perf.$OMPI_COMM_WORLD_RANK.data \\
        python3 ring_loop.py PORT
"""
import sys
import time

import numpy as np
from mpi4py import MPI

from pyhorovod import _core


def communicator(world, port, secret, prefix, direct_bytes, segment_bytes=0):
    rank, size = world.Get_rank(), world.Get_size()
    o = _core.ConnectOptions()
    o.rank, o.size, o.local_rank, o.local_size = rank, size, rank, size
    o.store_host, o.store_port, o.secret = "127.0.0.1", port, secret
    o.bind_host, o.store_prefix, o.connect_timeout_s = "127.0.0.1", prefix, 60.0
    o.shm_enable = True
    o.shm_direct_bytes = direct_bytes
    if segment_bytes:
        t = _core.Tuning()
        t.segment_bytes = segment_bytes
        o.tuning = t
    return _core.Communicator(o)


def per_call_us(world, fn, iters):
    world.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return world.allreduce((time.perf_counter() - t0) / iters * 1e6, op=MPI.MAX)


def start():
    """(world, rank, size, port, secret, store server or None): the store on the port of argv[1], rank 0's."""
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    port, secret = int(sys.argv[1]), b"x" * 16
    server = _core.TcpStoreServer("127.0.0.1", port, secret) if rank == 0 else None
    world.Barrier()
    return world, rank, size, port, secret, server


def main():
    world, rank, size, port, secret, server = start()
    ring = communicator(world, port, secret, "r", 1 << 40)
    send = np.ones((256 << 10) // 4 // size, np.float32) * rank
    recv = np.empty((256 << 10) // 4, np.float32)

    def gather():
        ring.allgatherv(send, recv, [send.nbytes] * size, 60.0)

    first = per_call_us(world, gather, 300)
    loop = per_call_us(world, gather, int(3e6 / first))
    lines = [f"first: {first:.1f} us", f"loop: {loop:.1f} us"]
    half, other = send.size, np.empty_like(send)
    for label, dst in (("send->recv[0]", recv[:half]), ("send->recv[1]", recv[half:]), ("send->fresh", other)):
        lines.append(f"{label}: {per_call_us(world, lambda: np.copyto(dst, send), 1000):.1f} us")
    if rank == 0:
        print("\n".join(lines), flush=True)
    ring.close()
    world.Barrier()
    del server


if __name__ == "__main__":
    main()
