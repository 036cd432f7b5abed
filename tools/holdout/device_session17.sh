#!/usr/bin/env bash
# Session 17 on the GPU machine (torch 2.11, CUDA build): issue #16's Triton kernel times.
#   PART a: triton_sweep.py --set inmodel (training kernels forward and backward: bias-gradient
#           column sums, residual layer norms, channels-last batch norm, casts, permutes, embedding
#           gathers; fitted on) and the lease's host probe
#   PART b: the compiled blind set (compare.py COMPILED_BLIND2, chosen before any run), 10 steps
#           each, unprofiled
#   PART c: one profiled run of each blind case, kept for after their comparison
# Usage: tools/holdout/device_session17.sh OUTDIR PART
set -u
out=$1; part=$2
source "$(dirname "$0")/device_env.sh"
if [ "$part" = a ]; then
  python3 -m phantora_prof.measure.host_probe --out "$out/host_probe.json" > /dev/null 2>&1; echo "== probe rc=$?" >> "$log"
  timeout 480 python3 "$H/triton_sweep.py" --set inmodel --out "$out/triton_inmodel_h200.jsonl" >> "$log" 2>&1
  echo "== sweep rc=$?" >> "$log"
elif [ "$part" = b ]; then
  python3 "$H/compare.py" --real-gpu --only hf_opt_c,hf_qwen2_c,timm_resnext_c,tv_efficientnet_c --real-dir "$out" >> "$log" 2>&1
  echo "== blind rc=$?" >> "$log"
else
  tmp=$(mktemp -d)
  for m in hf_opt hf_qwen2 timm_resnext tv_efficientnet; do
    (cd "$H" && timeout 150 python3 zoo.py --model $m --compile --steps 6 --profile-dir "$tmp/$m" > "$tmp/$m.log" 2>&1)
    echo "== profile $m rc=$?" >> "$log"
    f=$(ls "$tmp/$m"/*.pt.trace.json* 2>/dev/null | head -1)
    case "$f" in *.gz) cp "$f" "$out/${m}_c.pt.trace.json.gz";; "") ;; *) gzip -c "$f" > "$out/${m}_c.pt.trace.json.gz";; esac
  done
fi
cat "$log"
