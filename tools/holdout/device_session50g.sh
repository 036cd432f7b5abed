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

hidden_blind_set ZOO_BLIND20 blind20
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output s50g
