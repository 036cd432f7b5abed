#!/usr/bin/env bash
# Session 45's second device run (issue #14): fp32 self-attention on the memory-efficient backend
# (measure_kernels --only attention_fp32), L2 cold and warm, merged into OUTDIR/attention_fp32.json.
# Usage: device_session45b.sh OUTDIR   (from the repository root)
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$out/log45b.txt"
timeout 200 python3 -m phantora_prof.measure.measure_kernels --only attention_fp32 --out /tmp/a32c.json >> "$out/log45b.txt" 2>&1
timeout 200 python3 -m phantora_prof.measure.measure_kernels --only attention_fp32 --warm-l2 --out /tmp/a32w.json > /dev/null 2>&1
python3 -m phantora_prof.measure.measure_kernels --merge /tmp/a32c.json /tmp/a32w.json --out "$out/attention_fp32.json" >> "$out/log45b.txt" 2>&1
cat "$out/log45b.txt"
