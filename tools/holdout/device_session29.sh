#!/usr/bin/env bash
# Session 29 on the GPU machine (issue #14, #15).
#   a: blind set 8 (compare.py ZOO_BLIND8, chosen before any run): this lease's host probe, the
#      ten timed steps of each model (compare.py --real-gpu), then a profile of each (5-step run,
#      steps 2-3 recorded) for diff_real.py
#   b: host time per phase, unprofiled, on the same lease (zoo.py / phases.py --host-probe): the
#      reference gpt.py and dev models next to blind set 8, for the host model's forward /
#      backward split (not fitted on blind set 8)
# Usage: tools/holdout/device_session29.sh OUTDIR a|b [WORKLOADS_DIR]
out=$1; part=s29$2; wl=${3:-}
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
blind=hf_bloom,hf_modernbert,hf_segformer,timm_nfnet,tv_vit_b32
if [ "$2" = a ]; then
  bash "$H/device_blind.sh" "$out" blind8 "$blind" --profiles >> "$log" 2>&1
else
  for m in hf_llama timm_vit tv_resnet50 hf_gpt2 ${blind//,/ }; do
    (cd "$H" && timeout 200 python3 zoo.py --model "$m" --steps 12 --host-probe) > "$out/phases_$m.log" 2>&1
    echo "phases $m rc=$? $(( $(date +%s) - start ))s" >> "$log"
  done
  for args in "" "--batch 1 --seq 64" "--batch 32"; do
    name=gpt$(echo "$args" | tr -d ' -')
    (cd "$wl" && timeout 200 python3 "$H/phases.py" gpt.py $args --steps 12) > "$out/phases_$name.log" 2>&1
    echo "phases $name rc=$? $(( $(date +%s) - start ))s" >> "$log"
  done
  python3 -m phantora_prof.measure.host_probe --out "$out/host_probe_s29b.json" > /dev/null 2>&1
fi
