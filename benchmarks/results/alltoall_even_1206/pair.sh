#!/bin/bash
# Launches alternate the tree before (d6325f4, built in /tmp/basewt) and after the change, four each, per
# world size: alltoall through the public API against Open MPI in the same processes.
# Usage: bash pair.sh NEW_TREE OUT_FILE
new=$1; out=$2
for np in 4 2; do
  for rep in 1 2 3 4; do
    for tree in /tmp/basewt "$new"; do
      echo "=== $tree np=$np rep=$rep" >> "$out"
      (cd "$tree" && PYTHONPATH="$tree" OPENBLAS_NUM_THREADS=1 flock /tmp/bench.lock timeout 600 python3 \
        benchmarks/perf_interleave.py --np $np --op alltoall --sizes 256,1K,4K,16K,64K --rounds 5 \
        --cands "api mpi") 2>&1 | grep -E "^ +[0-9]+[KMB]? " >> "$out"
    done
  done
done
