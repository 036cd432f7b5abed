#!/usr/bin/env bash
# Session 45's device run (issue #15): does an op's host cost depend on what the host did just
# before it (tools/holdout/op_warmth_probe.py), on the GPU machine's host, with CUDA ops and CPU
# ops; then session 44's second run (device_session44b.sh: the H200 timeline where the GPU is an
# H200, native py-spy of the tiny TP model on the GPU). Anchored by the reference gpt.py at batch 1.
# Usage: device_session45.sh OUTDIR   (from the repository root; run's carry: tools/holdout/_wl, .whl/py-spy.xz)
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
log=$out/log45.txt
nvidia-smi --query-gpu=name --format=csv,noheader > "$log"
grep -m1 "model name" /proc/cpuinfo >> "$log"; lscpu | grep -iE "L1d|L1i|L2|L3" >> "$log"
( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"
timeout 150 python3 tools/holdout/op_warmth_probe.py --device cuda --repeats 1500 --json "$out/warmth_cuda.json" >> "$log" 2>&1
timeout 120 python3 tools/holdout/op_warmth_probe.py --device cpu --repeats 1000 --json "$out/warmth_cpu.json" > /dev/null 2>&1
timeout 150 python3 tools/holdout/op_warmth_probe.py --device cuda --repeats 1500 --json "$out/warmth_cuda2.json" > /dev/null 2>&1
( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"
bash tools/holdout/device_session44b.sh "$out/s44b" > "$out/s44b.txt" 2>&1
cat "$log"
