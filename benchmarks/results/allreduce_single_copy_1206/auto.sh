#!/bin/sh
# Interleaved launches of auto.py under each policy; the engine's statistics line says how many calls ran
# as single copies. Usage: sh auto.sh NP MiB CALLS ROUNDS
np=$1; mib=$2; calls=$3; rounds=$4
for r in $(seq "$rounds"); do
  for pol in ring single auto; do
    out=$(OPENBLAS_NUM_THREADS=1 HOROVOD_LOG_LEVEL=info PYHOROVOD_ALLREDUCE_SINGLE_COPY=$pol \
          python3 -m pyhorovod.run -np "$np" python3 auto.py "$mib" "$calls" 2>&1)
    echo "np $np $mib MiB round $r $pol: $(echo "$out" | grep -o 'median_last_half_ms.*' | head -1)" \
         "| $(echo "$out" | grep -o '[0-9]* of [0-9]* large allreduces run as single copies, [0-9]* allreduce votes' | head -1)"
  done
done
