#!/usr/bin/env bash
# Session 45's device run (issues #15, #14): does an op's host cost depend on what the host did just
# before it (tools/holdout/op_warmth_probe.py), on the GPU machine's host, with CUDA ops and CPU
# ops; fp32 GEMMs at training shapes (measure_kernels --only gemm_fp32); then session 43's H200 timeline
# (device_session43b.sh) where the GPU is an H200. Anchored by the reference gpt.py at batch 1.
# Usage: device_session45.sh OUTDIR   (from the repository root; run's carry: tools/holdout/_wl, .whl/py-spy.xz)
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
log=$out/log45.txt
nvidia-smi --query-gpu=name --format=csv,noheader > "$log"
grep -m1 "model name" /proc/cpuinfo >> "$log"; lscpu | grep -iE "L1d|L1i|L2|L3" >> "$log"
( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"
timeout 90 python3 tools/holdout/op_warmth_probe.py --device cuda --repeats 1000 --json "$out/warmth_cuda.json" >> "$log" 2>&1
timeout 60 python3 tools/holdout/op_warmth_probe.py --device cpu --repeats 600 --json "$out/warmth_cpu.json" > /dev/null 2>&1
# fp32 GEMMs at training shapes (measure_kernels --only gemm_fp32), L2 cold and warm, merged
timeout 120 python3 -m phantora_prof.measure.measure_kernels --only gemm_fp32 --out /tmp/f32c.json >> "$log" 2>&1
timeout 120 python3 -m phantora_prof.measure.measure_kernels --only gemm_fp32 --warm-l2 --out /tmp/f32w.json > /dev/null 2>&1
python3 -m phantora_prof.measure.measure_kernels --merge /tmp/f32c.json /tmp/f32w.json --out "$out/gemm_fp32.json" >> "$log" 2>&1
( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"
# session 43's H200 timeline (the reference gpt.py's host forward / backward split), where the GPU is an H200
mkdir -p "$out/h200_timeline"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 170 bash tools/holdout/device_session43b.sh "$out/h200_timeline" > /dev/null 2>&1
fi
cat "$log" "$out/h200_timeline/log.txt" 2>/dev/null
