#!/usr/bin/env bash
# Session 32 on the GPU machine (issues #14, #16).
#   a: blind set 9 (compare.py ZOO_BLIND9, chosen before any run and simulated first): this lease's
#      host probe, ten timed steps of each model (compare.py --real-gpu), a profile of each (5-step
#      run, steps 2-3 recorded) for diff_real.py; then the sync_bn and rnn_cell kernel families
#      (sweep_families), which the cost model has only roofline times for
#   b: session 30's plan (device_session30.sh): compiled training with changing sequence lengths
#      and a compiled optimizer step, unprofiled
# Usage: tools/holdout/device_session32.sh OUTDIR a|b
out=$1; part=s32$2
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
blind=hf_vit_mae,hf_mobilevit,timm_bit,gru,hf_bart
if [ "$2" = a ]; then
  bash "$H/device_blind.sh" "$out" blind9 "$blind" --profiles >> "$log" 2>&1
  mkdir -p "$out/sweep"
  timeout 150 python3 -m phantora_prof.measure.sweep_families --only sync_bn,rnn_cell \
    --out "$out/sweep/sw11.pt.trace.json.gz" > "$out/sweep/sw11.log" 2>&1
  echo "sweep sw11 rc=$? $(( $(date +%s) - start ))s" >> "$log"
else
  bash "$H/device_session30.sh" "$out"
fi
