#!/usr/bin/env bash
# Session 35 on the GPU machine (issue #15: host time in context).
#   a: optimizer_context.py: the optimizer step's and the forward's host time in-model, repeated,
#      after a synchronize, after a pass that evicts the CPU caches, after an idle spell (~5 min)
#   b: session 34's part e (host_interleaved.py with one profiled step per case, dev and blind
#      sets; up to ~7 min: a separate call, as one device command may run 10 minutes at most)
# Usage: tools/holdout/device_session35.sh OUTDIR a|b WORKLOADS_DIR
out=$1; part=s35$2
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
wl=$(cd "$3" && pwd)
mkdir -p "$out/host"
if [ "$2" = a ]; then
  python3 -m phantora_prof.measure.host_probe --out "$out/host/host_probe_a.json" > /dev/null 2>&1
  echo "probe rc=$? $(( $(date +%s) - start ))s" >> "$log"
  for run in 1 2; do
    timeout 150 python3 "$H/optimizer_context.py" --gpt-dir "$wl" --out "$out/host/optimizer_context_$run.json" \
      > "$out/host/optimizer_context_$run.log" 2>&1
    echo "optimizer_context $run rc=$? $(( $(date +%s) - start ))s" >> "$log"
  done
elif [ "$2" = b ]; then
  bash "$H/device_session34.sh" "$out" e "$wl"
  echo "part e done $(( $(date +%s) - start ))s" >> "$log"
fi
