"""The 4-rank soak of tests/test_soak.py, sampling malloc's own figures next to RSS, to tell a leak (bytes
in use grow) from fragmentation (malloc's heap grows while what is in use stays).

    PYTHONPATH=tests:benchmarks/results/soak_heap_1206 python benchmarks/results/soak_heap_1206/soak_heap.py 120

Prints, per rank and per tenth of the run, the lowest and highest sample of
(RSS, heap, malloc's mmapped bytes, bytes in use, free bytes in the heap, mmapped blocks), in KiB.
"""
import ctypes
import sys

import fault_util
import test_soak
from mp import run_ranks

FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS]


def sample():
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    m = libc.mallinfo2()
    return (fault_util.rss_kb(), m.arena >> 10, m.hblkhd >> 10, m.uordblks >> 10, m.fordblks >> 10, m.hblks)


def body(seconds):
    test_soak.rss_kb = sample
    return test_soak.body_soak(seconds)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    results = run_ranks(body, 4, timeout=seconds + 120, args=(seconds,), env={"PYHOROVOD_TIMEOUT_SECONDS": "60"})
    for res in results:
        samples = res.value["samples"]
        print(f"rank {res.rank}: {res.value['ops']} ops; (rss, heap, mmapped, in use, free, blocks) KiB")
        for tenth in range(10):
            xs = [x for t, x in samples if seconds * tenth / 10 < t <= seconds * (tenth + 1) / 10]
            if xs:
                print(f"  {tenth}: lowest {min(xs)}  highest {max(xs)}")


if __name__ == "__main__":
    main()
