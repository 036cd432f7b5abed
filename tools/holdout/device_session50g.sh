#!/usr/bin/env bash
# Session 50, seventh lease (issue #14): blind set 20 (fp32 NCHW CNNs) timed once, its
# unprofiled phases and profiles, written to files only: the tail of this run shows nothing of
# the blind set, whose logs are opened after its simulation has run.
# Usage: tools/holdout/device_session50g.sh OUTDIR   (carry tools/holdout/_wl). Leaves OUTDIR.s50g.tgz.
out=$1; part=s50g
source "$(dirname "$0")/device_env.sh"
export HF_HUB_OFFLINE=1
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"


blind=$out/blind20_run.txt
anchor_log=$log; log=$blind; anchor; log=$anchor_log
cases=$(compare_py "','.join(compare.ZOO_BLIND20)")
python3 "$H/compare.py" --real-gpu --only "$cases" --real-dir "$out/blind20" >> "$blind" 2>&1
echo "timed rc=$? $(( $(date +%s) - start ))s" >> "$log"
for m in ${cases//,/ }; do
  args=$(compare_py "' '.join(compare.CASES['$m'][1])")
  p=$(cd "$H" && timeout 150 python3 phases.py zoo.py $args --steps 10 2>&1 | grep -E '^PHASES ')
  echo "phases $m $p" >> "$blind"
done
log=$blind; anchor; log=$anchor_log
profile_cases "$cases" > /dev/null 2>&1
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output s50g
