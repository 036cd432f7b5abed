#!/usr/bin/env bash
# Session 47 on the GPU machine (issues #14 / #15): where blind set 14's LR-ASPP (-32.5% on
# session 46's H100 lease, unprofiled) spends its step. The reference gpt.py's host anchor
# (--batch 1 --seq 64), LR-ASPP's unprofiled host phases (phases.py, twice) and step times, then
# a profile of each blind-14 model (5 steps, 2-3 recorded) for diff_real.py, LR-ASPP first.
# Usage: tools/holdout/device_session47.sh OUTDIR   (run's carry: tools/holdout/_wl). Leaves OUTDIR.s47.tgz.
out=$1; part=s47
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
anchor
for r in 1 2; do
  p=$(cd "$H" && timeout 120 python3 phases.py zoo.py --model tv_lraspp --batch 24 --image 512 --steps 12 2>&1 | grep -E '^PHASES |RESULT')
  echo "lraspp phases $r $p" >> "$log"
done
anchor
profile_cases tv_lraspp,hf_hubert,hf_gpt_bigcode
anchor
cat "$log"
pack_output s47
