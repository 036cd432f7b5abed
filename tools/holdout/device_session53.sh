#!/usr/bin/env bash
# Session 53 (2026-12-07), one call on whichever GPU comes: the conv_dw_multiplier family sweep
# (depthwise convolutions with a channel multiplier and depthwise 1x1: cuDNN's per-group loops seen
# in blind set 22's FastViT profile on an H100), started configurations stopping after MAXS s
# (default 280) so the trace is still written; then the host anchor.
# Usage: tools/holdout/device_session53.sh OUTDIR   (carry tools/holdout/_wl). Leaves OUTDIR.s53.tgz.
out=$1; part=s53
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$log"
export out log H start part
anchor
mkdir -p "$out/sweep"
timeout 540 python3 -m phantora_prof.measure.sweep_families --only conv_dw_multiplier --max-seconds "${MAXS:-280}" \
  --out "$out/sweep/sw33.pt.trace.json.gz" > "$out/sweep/sw33.log" 2>&1
echo "sweep sw33 conv_dw_multiplier rc=$? $(( $(date +%s) - start ))s" >> "$log"
tail -3 "$out/sweep/sw33.log" >> "$log"
anchor
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output "$part"
