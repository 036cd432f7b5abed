#!/usr/bin/env bash
# Session 43's second device run (issue #15): on the H200 machine itself, the reference gpt.py at
# batch 8 (its step) and at batch 1 / seq 64 (the host's speed), and forward_timeline.py at both
# (the host's forward / backward split and where the GPU waits for it), twice, alternating.
# Usage: device_session43b.sh OUTDIR   (from the repository root; run's carry: tools/holdout/_wl)
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
log=$out/log.txt
gpt() { ( cd tools/holdout/_wl && timeout 120 python3 gpt.py "$@" --steps 12 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' | sed "s/^/gpt $* /" >> "$log"; }
echo "gpu $(nvidia-smi --query-gpu=name --format=csv,noheader) cpu $(grep -m1 'model name' /proc/cpuinfo)" >> "$log"
F=tools/holdout/forward_timeline.py
for r in 1 2; do
  gpt --batch 1 --seq 64
  gpt --batch 8
  echo "b8 $(timeout 120 python3 $F --batch 8 --steps 14 2>&1 | grep -E 'TIMELINE|Error')" >> "$log"
  echo "b1 $(timeout 120 python3 $F --batch 1 --seq 64 --steps 14 2>&1 | grep -E 'TIMELINE|Error')" >> "$log"
done
gpt --batch 1 --seq 64
cat "$log"
