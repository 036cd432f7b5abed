#!/usr/bin/env bash
# Session 52 (2026-12-07): the H200 half of session 51 in one lease. Blind set 21 (compare.py's
# ZOO_BLIND21, whose H200 predictions were recorded in session 51 before any run,
# real_h200/session51/simulated_h200_before_run.json) measured hidden as device_session51.sh does
# it (its results only in files, under LIMIT seconds, default 380), then the cuDNN RNN family
# again (sweep_families --only rnn, sw32) for the H200's table, whose rnn points still sum the
# kernels cuDNN runs on its own streams (session 51 re-measured only the H100's).
# Usage: tools/holdout/device_session52.sh OUTDIR   (carry tools/holdout/_wl). Leaves OUTDIR.s52.tgz.
out=$1; part=s52
source "$(dirname "$0")/device_env.sh"
export HF_HUB_OFFLINE=1
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$log"
python3 -c "import transformers, timm, torchvision; print('transformers', transformers.__version__, 'timm', timm.__version__, 'torchvision', torchvision.__version__)" >> "$log" 2>&1
export out log H start part
export -f compare_py anchor blind_set profile_cases hidden_blind_set
timeout -k 10 "${LIMIT:-380}" bash -c 'hidden_blind_set ZOO_BLIND21 blind21; exit 0'
rc=$?
[ $rc -ne 0 ] && echo "limit rc=$rc $(( $(date +%s) - start ))s" >> "$log"
sweep 32 rnn 120
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output "$part"
