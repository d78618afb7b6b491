"""2-rank allgather through the ring (single copies off) and through single copies (from 16 KiB blocks up),
at 64 KiB, 256 KiB and 1 MiB, in one set of processes: what the ring gains in the fast state.

    for i in $(seq 1 16); do mpirun -np 2 python3 ring_vs_single.py $((39000 + i)); done
"""

import numpy as np

from ring_loop import communicator, per_call_us, start


def main():
    world, rank, size, port, secret, server = start()
    cands = {"ring": communicator(world, port, secret, "a", 1 << 40),
             "single": communicator(world, port, secret, "b", 16 << 10)}
    line = []
    for nbytes in (64 << 10, 256 << 10, 1 << 20):
        send, recv = np.ones(nbytes // size, np.uint8), np.empty(nbytes, np.uint8)
        for name, c in cands.items():
            def gather():
                c.allgatherv(send, recv, [send.nbytes] * size, 60.0)
            gather()
            line.append(f"{nbytes >> 10}K {name} {per_call_us(world, gather, max(100, (200 << 20) // nbytes)):.1f}")
    if rank == 0:
        print(" | ".join(line), flush=True)
    for c in cands.values():
        c.close()
    world.Barrier()
    del server


if __name__ == "__main__":
    main()
