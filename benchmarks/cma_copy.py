"""Is a single-copy shared-memory path worth building here? process_vm_readv (cross-memory attach, CMA:
the kernel copies straight from another process's memory) against the two memcpy calls our shared-memory
ring makes for the same bytes (sender into the ring, receiver out of it).

    python benchmarks/cma_copy.py                 # 1, 4, 8.4 and 64 MiB, 40 repetitions each

A child process holds a buffer; the parent reads it with process_vm_readv into a private buffer, and
copies between two private buffers with memmove (libc memcpy), alternating, repetition by repetition.
CMA replaces two copies by one, so it wins only where one CMA copy costs less than two memcpy calls.
"""
import ctypes
import multiprocessing as mp
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common as C  # noqa: E402


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def holder(nbytes, conn):
    buf = ctypes.create_string_buffer(b"\x01" * nbytes, nbytes)
    conn.send(ctypes.addressof(buf))
    conn.recv()   # keep the buffer alive until the parent is done


def measure(nbytes, reps):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    parent_end, child_end = mp.Pipe()
    child = mp.Process(target=holder, args=(nbytes, child_end), daemon=True)
    child.start()
    try:
        remote = parent_end.recv()
        dst = ctypes.create_string_buffer(nbytes)
        src = ctypes.create_string_buffer(b"\x02" * nbytes, nbytes)
        local_iov = IoVec(ctypes.addressof(dst), nbytes)
        remote_iov = IoVec(remote, nbytes)
        cma, copy = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            got = libc.process_vm_readv(child.pid, ctypes.byref(local_iov), 1, ctypes.byref(remote_iov), 1, 0)
            t1 = time.perf_counter()
            ctypes.memmove(dst, src, nbytes)
            t2 = time.perf_counter()
            if got != nbytes:
                raise OSError(ctypes.get_errno(), f"process_vm_readv read {got} of {nbytes} bytes")
            cma.append(t1 - t0)
            copy.append(t2 - t1)
        if dst.raw[:1] != b"\x02":
            raise AssertionError("memmove did not copy")
        return statistics.median(cma), statistics.median(copy)
    finally:
        parent_end.send("done")
        child.join(10)


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--sizes", default="1M,4M,8800K,64M")
    p.add_argument("--reps", type=int, default=40)
    args = p.parse_args(argv)
    rows = []
    for size in args.sizes.split(","):
        n = C.parse_size(size)
        cma, copy = measure(n, args.reps)
        rows.append([C.fmt_size(n), f"{cma * 1e3:.3f}", f"{copy * 1e3:.3f}", f"{2 * copy * 1e3:.3f}",
                     f"{cma / (2 * copy):.2f}"])
    print("# one process_vm_readv against memcpy (medians); CMA pays off where the last column is < 1")
    C.print_table(["size", "CMA ms", "memcpy ms", "2 x memcpy ms", "CMA / 2 memcpy"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
