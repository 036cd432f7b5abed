#!/usr/bin/env bash
# Session 36 on the GPU machine.
#   a: blind set 11 (compare.py ZOO_BLIND11, simulated first: real_h200/session36/blind11_simulated_*.json)
#      timed once and profiled (device_blind.sh --profiles), then optimizer_context.py once (issue #15:
#      the optimizer step in-model against repeated, after a synchronize, cold caches, an idle core)
#   (session 37: part a runs blind set 12 timed and profiled, then blind set 11's profiles alone;
#    a36 is part a as session 36 ran it)
#   b: session 34's part e (host_interleaved.py with one profiled step per case, for --op-costs)
# Usage: tools/holdout/device_session36.sh OUTDIR a|b WORKLOADS_DIR   (run's carry: tools/holdout/_wl)
# Leaves OUTDIR.a.tgz (or .b.tgz): everything the part wrote, in one archive.
out=$1; part=s36$2
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
wl=$(cd "$3" && pwd)
if [ "$2" = a ]; then
  # session 37: the launch queue's depth (launch_depth.py, ~10 s), then blind set 12 (GPU-bound, at scale: device_session37.sh part c), then blind set
  # 11's profiles alone (session 36's run timed it; its profiles did not come back)
  timeout 40 python3 "$H/launch_depth.py" --out "$out/launch_depth.json" > "$out/launch_depth.log" 2>&1
  echo "launch_depth rc=$? $(( $(date +%s) - start ))s" >> "$log"
  timeout 370 bash "$H/device_blind.sh" "$out/blind12" blind12 "$(compare_py "','.join(compare.ZOO_BLIND12)")" \
    --profiles > "$out/blind12.log" 2>&1
  echo "blind12 rc=$? $(( $(date +%s) - start ))s" >> "$log"
  timeout 170 bash "$H/device_blind.sh" "$out/blind11" blind11 "$(compare_py "','.join(compare.ZOO_BLIND11)")" \
    --profiles-only > "$out/blind11.log" 2>&1
  echo "blind11 profiles rc=$? $(( $(date +%s) - start ))s" >> "$log"
elif [ "$2" = a36 ]; then  # session 36's part a as it ran there
  timeout 400 bash "$H/device_blind.sh" "$out/blind11" blind11 "$(compare_py "','.join(compare.ZOO_BLIND11)")" \
    --profiles > "$out/blind11.log" 2>&1
  echo "blind11 rc=$? $(( $(date +%s) - start ))s" >> "$log"
  mkdir -p "$out/host"
  timeout 150 python3 "$H/optimizer_context.py" --gpt-dir "$wl" --out "$out/host/optimizer_context_1.json" \
    > "$out/host/optimizer_context_1.log" 2>&1
  echo "optimizer_context rc=$? $(( $(date +%s) - start ))s" >> "$log"
elif [ "$2" = b ]; then
  bash "$H/device_session34.sh" "$out" e "$wl"
  echo "part e done $(( $(date +%s) - start ))s" >> "$log"
fi
pack_output "$2"
