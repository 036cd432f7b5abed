#!/usr/bin/env bash
# Session 48 on the GPU machine (issue #14, blind set 15; issue #15): the host anchor
# (gpt.py --batch 1 --seq 64), blind set 15 timed once (compare.py --real-gpu, unprofiled), the
# unprofiled host phases (phases.py) of the three models the simulation calls host-bound or
# nearly, then a profile of each (5 steps, 2-3 recorded), and the anchor again.
# Usage: tools/holdout/device_session48.sh OUTDIR   (run's carry: tools/holdout/_wl). Leaves OUTDIR.s48.tgz.
out=$1; part=s48
source "$(dirname "$0")/device_env.sh"
export HF_HUB_OFFLINE=1  # transformers' hub-kernel lookups fail at once (the machine has no internet)
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
python3 -c "import transformers, timm; print('transformers', transformers.__version__, 'timm', timm.__version__)" >> "$log" 2>&1
anchor
cases=$(compare_py "','.join(compare.ZOO_BLIND15)")
python3 "$H/compare.py" --real-gpu --only "$cases" --real-dir "$out/blind15" >> "$log" 2>&1
echo "timed rc=$? $(( $(date +%s) - start ))s" >> "$log"
for m in timm_pvt_v2 timm_resnest hf_mamba; do
  p=$(cd "$H" && timeout 150 python3 phases.py zoo.py --model $m --steps 10 2>&1 | grep -E '^PHASES ')
  echo "phases $m $p" >> "$log"
done
anchor
profile_cases "$cases"
cat "$log"
pack_output s48
