#!/usr/bin/env bash
# Session 46 on the GPU machine (issue #14), one call:
#   the anchor (gpt.py --batch 1 --seq 64, for the lease's host speed), fp32 attention on the
#   memory-efficient backend (device_session45b.sh: measure_kernels --only attention_fp32, L2 cold
#   and warm, merged), and the speech encoders' positional convolution (sweep_families --only
#   conv1d_pos as sweep sw20: Conv1d(C, C, 128, padding=64, groups=16) over batch x length), and
#   pooled upsampling with a channels-last gradient (upsample_pool_cl, sw21: DeepLabV3-style ASPP),
#   weight norm and CTC loss (speech, sw22). fp32 attention only where the GPU is an H200.
# Usage: tools/holdout/device_session46.sh OUTDIR   (run's carry: tools/holdout/_wl). Leaves OUTDIR.s46.tgz.
out=$1; part=s46
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
( cd "$H/_wl" && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"
echo "anchor rc=$? $(( $(date +%s) - start ))s" >> "$log"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then  # h200_measured.json's GPU
  bash "$H/device_session45b.sh" "$out/attention_fp32" > /dev/null 2>&1
  echo "attention_fp32 rc=$? $(( $(date +%s) - start ))s" >> "$log"
fi
sweep 20 conv1d_pos 240
sweep 21 upsample_pool_cl 90
sweep 22 speech 120
cat "$log"
pack_output s46
