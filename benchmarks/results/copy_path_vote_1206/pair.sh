#!/usr/bin/env bash
# Launches alternating PYHOROVOD_SHM_DIRECT_ADAPT=off (the fixed threshold) and auto (the negotiated copy
# path), the API paired with Open MPI and with the raw core (always the fixed threshold: its time tells the
# host's state) inside each launch; prints each launch's rows for the sizes whose pieces lie between
# 64 KiB and the single-copy threshold.
# usage: pair.sh LAUNCHES_PER_MODE [SPEC ...], a SPEC being "RANKS OP SIZES" (default: the four below)
cd "$(dirname "$0")/../../.." || exit 1
n="${1:-3}"
shift
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=("2 allgather 256K,1M" "2 alltoall 256K,1M" "4 alltoall 256K,512K" "4 allgather 512K")
for i in $(seq "$n"); do
  for mode in off auto; do
    for spec in "${specs[@]}"; do
      set -- $spec
      echo "== launch $i mode $mode np $1 op $2"
      PYHOROVOD_SHM_DIRECT_ADAPT=$mode OPENBLAS_NUM_THREADS=1 flock /tmp/bench.lock timeout 300 \
        python3 benchmarks/perf_interleave.py --np "$1" --op "$2" --sizes "$3" --rounds 5 --cands "core api mpi" 2>&1 |
        grep -E "^ +[0-9]+[KM] (core|api|mpi)"
    done
  done
done
