"""Is a single-copy shared-memory path worth building here? process_vm_readv (cross-memory attach, CMA:
the kernel copies straight from another process's memory) against the two memcpy calls our shared-memory
ring makes for the same bytes (sender into the ring, receiver out of it).

    python benchmarks/cma_copy.py                 # 1, 4, 8.4 and 64 MiB, 40 repetitions each

A child process holds a buffer; the parent reads it with process_vm_readv into a private buffer, and
copies between two private buffers with memmove (libc memcpy), alternating, repetition by repetition.
CMA replaces two copies by one, so it wins only where one CMA copy costs less than two memcpy calls.

Every buffer is measured twice: on 4 KiB pages and on transparent huge pages (2 MiB, asked with
madvise before the first touch, as numpy does for its arrays of 4 MiB and more). The kernel pins the
source's pages one by one for each read, so the page size of the source decides much of CMA's speed.

    python benchmarks/cma_copy.py --phases 0:0,16:16,16:0,0:16,48:16 --sizes 64M   # huge pages only

The same read with the source and the destination starting at the given offsets (bytes) within a 64-byte
line. The kernel's copy slows when the two differ modulo 32 (csrc/transport/cross_memory.h); glibc's
memmove, measured between the same offsets, does not.
"""
import ctypes
import mmap
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


HUGE = 2 << 20


def page_buffer(nbytes, huge, fill):
    """(mapping, address) of nbytes at a 2 MiB-aligned address, on huge or small pages, filled with `fill`."""
    m = mmap.mmap(-1, nbytes + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # shared: no THP
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    offset = -base % HUGE
    m.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    ctypes.memset(base + offset, fill, nbytes)
    return m, base + offset


def holder(nbytes, huge, conn):
    buf, addr = page_buffer(nbytes + 64, huge, 1)
    conn.send(addr)
    conn.recv()   # keep the buffer alive until the parent is done
    del buf


def measure(nbytes, reps, huge, src_phase=0, dst_phase=0):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    parent_end, child_end = mp.Pipe()
    child = mp.Process(target=holder, args=(nbytes, huge, child_end), daemon=True)
    child.start()
    try:
        remote = parent_end.recv() + src_phase
        dst_map, dst = page_buffer(nbytes + 64, huge, 0)
        src_map, src = page_buffer(nbytes + 64, huge, 2)
        dst, src = dst + dst_phase, src + src_phase
        local_iov = IoVec(dst, nbytes)
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
        if ctypes.string_at(dst, 1) != b"\x02":
            raise AssertionError("memmove did not copy")
        return statistics.median(cma), statistics.median(copy)
    finally:
        parent_end.send("done")
        child.join(10)


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--sizes", default="1M,4M,8800K,64M")
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--phases", default="", help="SRC:DST,... offsets within a 64-byte line (huge pages only)")
    args = p.parse_args(argv)
    if args.phases:
        return phase_table(args)
    rows = []
    for size in args.sizes.split(","):
        n = C.parse_size(size)
        for huge in (False, True):
            cma, copy = measure(n, args.reps, huge)
            rows.append([C.fmt_size(n), "2 MiB" if huge else "4 KiB", f"{cma * 1e3:.3f}", f"{copy * 1e3:.3f}",
                         f"{n / cma / 1e9:.1f}", f"{n / copy / 1e9:.1f}", f"{cma / (2 * copy):.2f}"])
    print("# one process_vm_readv against memcpy (medians); CMA pays off where the last column is < 1")
    C.print_table(["size", "pages", "CMA ms", "memcpy ms", "CMA GB/s", "memcpy GB/s", "CMA / 2 memcpy"], rows)
    return 0


def phase_table(args):
    pairs = [tuple(int(x) for x in pair.split(":")) for pair in args.phases.split(",")]
    rows = []
    for size in args.sizes.split(","):
        n = C.parse_size(size)
        first = None
        for src, dst in pairs:
            cma, copy = measure(n, args.reps, True, src, dst)
            first = first or cma
            rows.append([C.fmt_size(n), src, dst, f"{cma * 1e3:.3f}", f"{copy * 1e3:.3f}", f"{n / cma / 1e9:.1f}",
                         f"{cma / first:.2f}"])
    print("# process_vm_readv and memmove between offsets within a 64-byte line, huge pages (medians)")
    C.print_table(["size", "src", "dst", "CMA ms", "memmove ms", "CMA GB/s", "CMA / first row"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
