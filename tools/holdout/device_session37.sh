#!/usr/bin/env bash
# Session 37 on the GPU machine.
#   c: blind set 12 (compare.py ZOO_BLIND12: 7-8B LLM layers at 8k tokens, ViT-L/16, ResNet-152;
#      simulated first: real_h200/session37/blind12_simulated_*.json), timed once and profiled
#      (device_blind.sh --profiles)
#   a, b: session 36's parts (device_session36.sh)
# Usage: tools/holdout/device_session37.sh OUTDIR c WORKLOADS_DIR   (run's carry: tools/holdout/_wl)
# Leaves OUTDIR.c.tgz: everything the part wrote, in one archive (the device tool returns a limited
# number of files).
out=$1; part=s37$2
if [ "$2" != c ]; then exec bash "$(dirname "$0")/device_session36.sh" "$@"; fi
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
timeout 560 bash "$H/device_blind.sh" "$out/blind12" blind12 "$(compare_py "','.join(compare.ZOO_BLIND12)")" \
  --profiles > "$out/blind12.log" 2>&1
echo "blind12 rc=$? $(( $(date +%s) - start ))s" >> "$log"
pack_output "$2"
