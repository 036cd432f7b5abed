#!/usr/bin/env bash
# Session 43's device run (issue #15): where the reference gpt.py's host time goes per block and
# phase (forward_timeline.py at batch 8 and at batch 1 / seq 64, unprofiled: the per-op table's
# forward / backward split), and the TP example's model plain / tp / fsdp at tiny sizes on the
# GPU, unprofiled and profiled per phase (dtensor_overhead.py --profile: phase ranges, to hold
# against the simulated profile op by op), and on a CPU (gloo) mesh.
# Usage: device_session43.sh OUTDIR   (from the repository root; run's carry: tools/holdout/_wl)
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
log=$out/log.txt
anchor() { ( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"; }
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517
echo "cpu $(grep -m1 'model name' /proc/cpuinfo) torch $(python3 -c 'import torch; print(torch.__version__)')" >> "$log"
anchor
F=tools/holdout/forward_timeline.py
for r in 1 2; do
  echo "b8 $(timeout 120 python3 $F --batch 8 --steps 14 2>&1 | grep -E 'TIMELINE|Error')" >> "$log"
  echo "b1 $(timeout 120 python3 $F --batch 1 --seq 64 --steps 14 2>&1 | grep -E 'TIMELINE|Error')" >> "$log"
done
anchor
P=tools/holdout/dtensor_overhead.py
T="--dim 64 --heads 4 --seq 16 --batch 2 --vocab 512 --layers 8 --no-autocast"
for m in plain tp fsdp; do
  timeout 120 python3 $P --mode $m $T --steps 30 2>&1 | grep -E "OVERHEAD|Error" | sed "s/^/cuda /" >> "$log"
  timeout 120 python3 $P --mode $m $T --steps 30 --device cpu 2>&1 | grep -E "OVERHEAD|Error" | sed "s/^/cpu /" >> "$log"
done
for m in plain tp fsdp; do
  timeout 120 python3 $P --mode $m $T --steps 8 --profile "$out/prof_$m.json" 2>&1 | grep -E "Error" >> "$log"
  gzip -f "$out/prof_$m.json"
done
anchor
cat "$log"
