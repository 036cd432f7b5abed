#!/usr/bin/env bash
# Session 50, second lease (issue #14): fp32 memory-efficient attention at short sequences
# (measure_kernels --only attention_fp32_short), L2 cold and warm, merged into one file.
# Usage: tools/holdout/device_session50b.sh OUTDIR   Leaves OUTDIR.s50b.tgz.
out=$1; part=s50b
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
python3 -m phantora_prof.measure.measure_kernels --only attention_fp32_short --out "$out/afs_cold.json" >> "$log" 2>&1
echo "cold rc=$? $(( $(date +%s) - start ))s" >> "$log"
python3 -m phantora_prof.measure.measure_kernels --only attention_fp32_short --warm-l2 --out "$out/afs_warm.json" >> "$log" 2>&1
echo "warm rc=$? $(( $(date +%s) - start ))s" >> "$log"
python3 -m phantora_prof.measure.measure_kernels --merge "$out/afs_cold.json" "$out/afs_warm.json" \
  --out "$out/attention_fp32_short.json" >> "$log" 2>&1
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output s50b
