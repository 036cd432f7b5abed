#!/usr/bin/env bash
# Session 41 (issue #15), on the GPU machine (torch 2.11): do plain ops cost more in the TP model
# than in the plain one (dtensor_overhead.py --time-ops: layer_norm, SDPA, gelu timed per call),
# and does work run between two ops make the second dearer (cold_ops.py)? Usage: device_session41e.sh OUTDIR
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
log=$out/log.txt
anchor() { ( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"; }
P=tools/holdout/dtensor_overhead.py
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29515
anchor
for L in 4 8; do for m in plain tp; do
  echo "real $(timeout 120 python3 $P --mode $m --layers $L --steps 14 --time-ops 2>&1 | grep OVERHEAD)" >> "$log"
done; done
echo "real $(timeout 150 python3 tools/holdout/cold_ops.py 2>&1 | grep -E 'COLD|Error')" >> "$log"
echo "real $(timeout 150 python3 tools/holdout/cold_ops.py 2>&1 | grep -E 'COLD|Error')" >> "$log"
anchor
cat "$log"
