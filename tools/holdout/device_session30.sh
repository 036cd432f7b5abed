#!/usr/bin/env bash
# Session 30's plan for the GPU machine (issue #16; no GPU was lent in session 30, so nothing here
# has run yet). Compiled training with changing sequence lengths (dynamic shapes after Dynamo's
# automatic-dynamic recompile) and with a compiled optimizer step, timed unprofiled, then one
# profiled run of each for diff_real-style comparison; the simulated figures to hold them against
# are in tools/holdout/real_h200/session30/README.md.
# Usage: tools/holdout/device_session30.sh OUTDIR
out=$1; part=s30
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> "$log" 2>&1
python3 -m phantora_prof.measure.host_probe --out "$out/host_probe_s30.json" > /dev/null 2>&1
for opt in "" "--opt-compiled"; do
  name=dyn$(echo "$opt" | tr -d ' -')
  timeout 400 python3 "$H/compile_dynamic.py" $opt > "$out/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - start ))s" >> "$log"
  timeout 400 python3 "$H/compile_dynamic.py" $opt --batch 16 --layers 12 > "$out/${name}_b16.log" 2>&1
  echo "${name}_b16 rc=$? $(( $(date +%s) - start ))s" >> "$log"
done
