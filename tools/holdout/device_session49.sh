#!/usr/bin/env bash
# Session 49 on the GPU machine (issue #14, blind set 16): the host anchor (gpt.py --batch 1
# --seq 64), blind set 16 timed once (compare.py --real-gpu, unprofiled), the unprofiled host
# phases (phases.py) of each case, the anchor again, then a profile of each case (5 steps, 2-3 recorded).
# Usage: tools/holdout/device_session49.sh OUTDIR   (run's carry: tools/holdout/_wl). Leaves OUTDIR.s49.tgz.
out=$1; part=s49
source "$(dirname "$0")/device_env.sh"
export HF_HUB_OFFLINE=1  # transformers' hub-kernel lookups fail at once (the machine has no internet)
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
python3 -c "import transformers, timm, scipy; print('transformers', transformers.__version__, 'timm', timm.__version__, 'scipy', scipy.__version__)" >> "$log" 2>&1
anchor
cases=${CASES:-$(compare_py "','.join(compare.ZOO_BLIND16)")}  # CASES=a,b: only those (a rerun)
[ -z "${CASES:-}" ] && python3 "$H/ordinary_ops.py" cuda > "$out/ordinary_ops_cuda.txt" 2>&1
python3 "$H/compare.py" --real-gpu --only "$cases" --real-dir "$out/blind16" >> "$log" 2>&1
echo "timed rc=$? $(( $(date +%s) - start ))s" >> "$log"
for m in ${cases//,/ }; do
  p=$(cd "$H" && timeout 150 python3 phases.py zoo.py --model $m --steps 10 2>&1 | grep -E '^PHASES ')
  echo "phases $m $p" >> "$log"
done
anchor
profile_cases "$cases"
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output s49
