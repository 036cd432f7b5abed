#!/usr/bin/env bash
# Session 47's second device call (issue #14): dilated depthwise convolutions (sweep_families
# --only conv_dw_dilated as sweep sw25), which LR-ASPP's H100 profile showed at 2.5 ms per
# forward against a 33 us roofline; on an H200 also LR-ASPP's profile and steps there.
# Usage: tools/holdout/device_session47b.sh OUTDIR   Leaves OUTDIR.s47b.tgz.
out=$1; part=s47b
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
sweep 25 conv_dw_dilated 240
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p "$out/traces"
  tmp=$(mktemp -d)
  (cd "$H" && timeout 200 python3 zoo.py --model tv_lraspp --steps 5 --profile-dir "$tmp") > "$out/profiled_tv_lraspp.log" 2>&1
  echo "profile tv_lraspp rc=$? $(( $(date +%s) - start ))s" >> "$log"
  f=$(ls "$tmp"/*.pt.trace.json.gz 2>/dev/null | head -1)
  [ -n "$f" ] && cp "$f" "$out/traces/tv_lraspp_h200.pt.trace.json.gz"
fi
cat "$log"
pack_output s47b
