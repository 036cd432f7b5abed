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
  nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> "$log" 2>&1
  python3 -c "import transformers, timm, torchvision; print('transformers', transformers.__version__, 'timm', timm.__version__, 'torchvision', torchvision.__version__)" >> "$log" 2>&1
  python3 -m phantora_prof.measure.host_probe --out "$out/host_probe_blind9.json" > /dev/null 2>&1
  echo "probe rc=$? $(( $(date +%s) - start ))s" >> "$log"
  python3 "$H/compare.py" --real-gpu --only "$blind" --real-dir "$out" >> "$log" 2>&1
  echo "timed $(( $(date +%s) - start ))s" >> "$log"
  mkdir -p "$out/traces"
  for m in ${blind//,/ }; do
    tmp=$(mktemp -d)
    (cd "$H" && timeout 120 python3 zoo.py --model "$m" --steps 5 --profile-dir "$tmp") > "$out/profiled_$m.log" 2>&1
    rc=$?
    f=$(ls "$tmp"/*.pt.trace.json.gz 2>/dev/null | head -1)
    [ -n "$f" ] && cp "$f" "$out/traces/$m.pt.trace.json.gz"
    echo "profile $m rc=$rc $(( $(date +%s) - start ))s" >> "$log"
  done
  mkdir -p "$out/sweep"
  timeout 150 python3 -m phantora_prof.measure.sweep_families --only sync_bn,rnn_cell \
    --out "$out/sweep/sw11.pt.trace.json.gz" > "$out/sweep/sw11.log" 2>&1
  echo "sweep sw11 rc=$? $(( $(date +%s) - start ))s" >> "$log"
else
  bash "$H/device_session30.sh" "$out"
fi
