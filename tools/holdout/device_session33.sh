#!/usr/bin/env bash
# Session 33 on the GPU machine (issue #14).
#   a: blind set 10 (compare.py ZOO_BLIND10, chosen before any run and simulated first): this
#      lease's host probe and ten timed steps of each model (compare.py --real-gpu); then the
#      reductions_outer kernel family (column sums over a dense rows x columns grid, with the
#      launch each got; sw12 ran it before the family overwrote the L2 before each call)
#   b: a profile of each blind-set-10 model (5-step run, steps 2-3 recorded) for diff_real.py
#   c: the kernel families those profiles showed unmodelled: grouped 1 x 1 convolutions
#      (conv_grouped_1x1, sw13) and dilated 3 x 3 convolutions (conv_dilated, sw14)
#   d: the host-bound runs (compare.py HOST_BOUND, simulated first) with this lease's host probe;
#      then reductions_outer again with a cold L2 before each call (sw15; sw12 ran it warm)
#   e: unprofiled host time per phase (phases.py) of the host-bound runs
# Usage: tools/holdout/device_session33.sh OUTDIR a|b|c|d|e
out=$1; part=s33$2
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
blind=hf_mixtral,tv_deeplabv3,hf_swinv2,timm_convnextv2,timm_efficientvit
if [ "$2" = a ]; then
  bash "$H/device_blind.sh" "$out" blind10 "$blind" >> "$log" 2>&1
  sweep 12 reductions_outer 150
elif [ "$2" = b ]; then
  bash "$H/device_blind.sh" "$out" blind10 "$blind" --profiles-only >> "$log" 2>&1
elif [ "$2" = c ]; then
  sweep 13 conv_grouped_1x1 240
  sweep 14 conv_dilated 240
elif [ "$2" = d ]; then
  bash "$H/device_blind.sh" "$out/host" host33 "$(compare_py "','.join(compare.HOST_BOUND)")" >> "$log" 2>&1
  sweep 15 reductions_outer 200
else
  mkdir -p "$out/host"
  host_bound_phases "$out/host/phases_host33.txt"
  echo "phases $(( $(date +%s) - start ))s" >> "$log"
fi
