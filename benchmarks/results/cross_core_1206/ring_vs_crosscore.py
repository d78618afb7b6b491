"""Ring allgather of 256 KiB at 2 ranks (single copies off) and single-copy allgather, alternating with a
cross-core probe (pingpong.c) that rank 0 runs while rank 1 sleeps: does the ring's time follow the machine's
cross-core cost? With a second argument, a third candidate: the ring with segments of that many bytes.

    gcc -O2 -pthread -o pingpong pingpong.c
    for i in $(seq 1 25); do mpirun -np 2 python3 ring_vs_crosscore.py $((39600 + i)); done
    for i in $(seq 1 30); do mpirun -np 2 python3 ring_vs_crosscore.py $((40100 + i)) 131072; done
"""
import os
import subprocess
import sys
import time

import numpy as np

from ring_loop import communicator, per_call_us, start

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    world, rank, size, port, secret, server = start()
    ring = communicator(world, port, secret, "a", 1 << 40)
    single = communicator(world, port, secret, "b", 16 << 10)
    cands = [ring, single]
    if len(sys.argv) > 2:
        cands.append(communicator(world, port, secret, "c", 1 << 40, segment_bytes=int(sys.argv[2])))
    send = np.ones((256 << 10) // size, np.uint8)
    recv = np.empty(256 << 10, np.uint8)
    rows = []
    for _ in range(8):
        times = []
        for c in cands:
            c.allgatherv(send, recv, [send.nbytes] * size, 60.0)
            times.append(per_call_us(world, lambda: c.allgatherv(send, recv, [send.nbytes] * size, 60.0), 300))
        if rank == 0:
            out = subprocess.run([os.path.join(HERE, "pingpong")], capture_output=True, text=True).stdout.split()
            segs = f" seg {times[2]:5.1f}" if len(times) > 2 else ""
            rows.append(f"ring {times[0]:5.1f} single {times[1]:5.1f}{segs} "
                        f"pingpong_ns {out[3]:>4} remote_copy_us {out[5]:>4}")
        else:
            time.sleep(0.08)
        world.Barrier()
    if rank == 0:
        print("\n".join(rows), flush=True)
    for c in cands:
        c.close()
    world.Barrier()
    del server


if __name__ == "__main__":
    main()
