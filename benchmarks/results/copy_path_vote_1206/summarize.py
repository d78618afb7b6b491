"""pair.sh's output, one row per (ranks, op, size, mode): per launch, Open MPI's time over the API's, the
raw core's over the API's (the core keeps the fixed threshold, so its time also tells the host's state),
and the API's time.

    python summarize.py pair.txt
"""
import re
import sys
from collections import defaultdict

rows, head, times = defaultdict(list), None, {}
for line in open(sys.argv[1]):
    m = re.match(r"== launch (\d+) mode (\w+) np (\d+) op (\w+)", line)
    if m:
        head, times = m.groups(), {}
        continue
    m = re.match(r"\s+(\S+) (core|api|mpi)\s+([\d.]+)", line)
    if m and head:
        size, cand, us = m.group(1), m.group(2), float(m.group(3))
        times[(size, cand)] = us
        if all((size, c) in times for c in ("core", "api", "mpi")):
            api = times[(size, "api")]
            rows[(head[2], head[3], size, head[1])].append(
                (times[(size, "mpi")] / api, times[(size, "core")] / api, api, times[(size, "core")]))
for key in sorted(rows):
    cells = "  ".join(f"{m:.2f}/{c:.2f}" for m, c, _, _ in rows[key])
    print(f"np {key[0]} {key[1]:9s} {key[2]:>4s} {key[3]:4s} mpi/api, core/api: {cells}")
    print(f"{'':28s}api, core us: " + "  ".join(f"{a:.0f}/{c:.0f}" for _, _, a, c in rows[key]))

# By the host's state: a launch is in the slow state when its raw core took over 2.5x the fastest core
# time of that row's op and size in the file (the core keeps the fixed threshold, so the ring shows it).
print("\nmedian (range) of Open MPI's time over the API's, by the raw core's state in the launch:")
best = defaultdict(lambda: float("inf"))
for (np_, op, size, mode), cells in rows.items():
    for _, _, _, core in cells:
        best[(np_, op, size)] = min(best[(np_, op, size)], core)
for key in sorted(rows):
    parts = []
    for state in ("fast", "slow"):
        got = sorted(m for m, _, _, core in rows[key] if (core > 2.5 * best[key[:3]]) == (state == "slow"))
        if got:
            parts.append(f"{state} {len(got)}: {got[len(got) // 2]:.2f} ({got[0]:.2f}-{got[-1]:.2f})")
    print(f"np {key[0]} {key[1]:9s} {key[2]:>4s} {key[3]:4s} " + "   ".join(parts))
