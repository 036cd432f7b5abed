#!/usr/bin/env bash
# Session 46 on the GPU machine (issue #14), one call, most valuable first (the session's device
# time was mostly spent on refused starts):
#   the speech encoders' positional convolution (sweep_families --only conv1d_pos as sweep sw20:
#   Conv1d(C, C, 128, padding=64, groups=16) over batch x length), weight norm and CTC loss
#   (speech, sw22), pooled upsampling with a channels-last gradient (upsample_pool_cl, sw21:
#   DeepLabV3-style ASPP), reductions over short rows (reductions_short, sw23: SwinV2's cosine
#   attention norms, EfficientViT's sums), binary ops over operands dense in different orders
#   (pointwise_mixed, sw24); then, where the GPU is an H200 (h200_measured.json's GPU), fp32
#   attention on the memory-efficient backend (device_session45b.sh).
# Usage: tools/holdout/device_session46.sh OUTDIR   Leaves OUTDIR.s46.tgz.
out=$1; part=s46
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
sweep 20 conv1d_pos 150
sweep 22 speech 90
sweep 21 upsample_pool_cl 60
sweep 23 reductions_short 60
sweep 24 pointwise_mixed 60
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 150 bash "$H/device_session45b.sh" "$out/attention_fp32" > /dev/null 2>&1
  echo "attention_fp32 rc=$? $(( $(date +%s) - start ))s" >> "$log"
fi
cat "$log"
pack_output s46
