#!/usr/bin/env bash
# Session 50 on the GPU machine (issue #14, blind set 17: training recipes): the host anchor
# (gpt.py --batch 1 --seq 64), blind set 17 timed once (compare.py --real-gpu, unprofiled), the
# unprofiled host phases (phases.py) of each case, the anchor again, then a profile of each case
# (5 steps, 2-3 recorded).
# Usage: tools/holdout/device_session50.sh OUTDIR   (run's carry: tools/holdout/_wl). Leaves OUTDIR.s50.tgz.
# SET=ZOO_BLIND18 measures blind set 18 instead (into OUTDIR/blind18, OUTDIR.s50c.tgz).
out=$1; set_name=${SET:-ZOO_BLIND17}; dir=blind${set_name#ZOO_BLIND}
part=s50; [ "$set_name" != ZOO_BLIND17 ] && part=s50c
source "$(dirname "$0")/device_env.sh"
export HF_HUB_OFFLINE=1  # transformers' hub-kernel lookups fail at once (the machine has no internet)
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
python3 -c "import transformers, timm; print('transformers', transformers.__version__, 'timm', timm.__version__)" >> "$log" 2>&1
python3 -c "import torch; print('cudnn.allow_tf32', torch.backends.cudnn.allow_tf32, 'matmul.allow_tf32', torch.backends.cuda.matmul.allow_tf32)" >> "$log" 2>&1
anchor
cases=${CASES:-$(compare_py "','.join(compare.$set_name)")}  # CASES=a,b: only those (a rerun)
blind_set "$cases" "$out/$dir" "$log"
anchor
profile_cases "$cases"
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output $part
