#!/usr/bin/env bash
# Session 41 (issue #15), on the GPU machine (torch 2.11): DTensor's host cost in context,
# without a profiler: dtensor_overhead.py plain and tp at 2, 4 and 8 blocks, real and simulated
# with the machine's torch, between two anchors (the reference gpt.py --batch 1 --seq 64).
# Usage: device_session41b.sh OUTDIR
set -u
out=$1; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/orjson-*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
log=$out/log.txt
anchor() { ( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"; }
anchor
P=tools/holdout/dtensor_overhead.py
for L in 2 4 8; do for m in plain tp; do
  echo "real $(timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node=1 $P --mode $m --layers $L --steps 14 2>&1 | grep OVERHEAD)" >> "$log"
done; done
anchor
for L in 2 4 8; do for m in plain tp; do
  echo "sim211 $(timeout 150 python3 -m phantora_prof --gpu h200 --no-trace --out /tmp/ov --nproc-per-node 1 torchrun --nproc-per-node 1 $P --mode $m --layers $L --steps 8 2>&1 | grep OVERHEAD)" >> "$log"
done; done
cat "$log"
