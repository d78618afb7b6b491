"""Per-call phases of the 2-rank alltoall from the two ranks' trace files (alltoall_trace.diff writes, per
call: entry, own block copied, descriptors in, writes done, return; CLOCK_MONOTONIC, microseconds)."""
import glob
import statistics as st
import sys

runs = [[list(map(float, line.split())) for line in open(f)] for f in sorted(glob.glob(sys.argv[1] + ".*"))]
n = min(len(a) for a in runs)
a0, a1 = (a[-n:] for a in runs)
rows = []
for i in range(5, n):
    a, b = a0[i], a1[i]
    rows.append({
        "start_skew": abs(a[0] - b[0]),
        "memmove": (a[1] - a[0] + b[1] - b[0]) / 2,
        "desc": (a[2] - a[1] + b[2] - b[1]) / 2,            # waiting for the peer's descriptor
        "write": (a[3] - a[2] + b[3] - b[2]) / 2,
        "done_wait": (a[4] - a[3] + b[4] - b[3]) / 2,
        "write_end_skew": abs(a[3] - b[3]),
        "wake": (a[4] - max(a[3], b[3]) + b[4] - max(a[3], b[3])) / 2,   # return after the later write ended
        "between": (a0[i][0] - a0[i - 1][4] + a1[i][0] - a1[i - 1][4]) / 2,  # Python and negotiation
        "call": max(a[4], b[4]) - max(a0[i - 1][4], a1[i - 1][4]),
    })
for key in rows[0]:
    xs = sorted(r[key] for r in rows)
    print(f"{key:15s} median {st.median(xs):8.1f}  p10 {xs[len(xs) // 10]:8.1f}  p90 {xs[9 * len(xs) // 10]:8.1f} us")
