#!/usr/bin/env bash
# Session 50, fifth lease (issue #14): the fp32 NCHW convolution and 2x2 pooling families
# (sweep_families conv_fp32_nchw -> sweep/sw27, pool_k2 -> sweep/sw28), then blind set 19 (fp32
# NCHW CNNs) timed once, its unprofiled phases and profiles, written to files only: the tail of
# this run shows the sweeps' status and nothing of the blind set, whose logs are opened after
# its simulation with the new sweeps has run.
# Usage: tools/holdout/device_session50e.sh OUTDIR   (carry tools/holdout/_wl). Leaves OUTDIR.s50e.tgz.
out=$1; part=s50e
source "$(dirname "$0")/device_env.sh"
export HF_HUB_OFFLINE=1
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
sweep 27 conv_fp32_nchw 200
sweep 28 pool_k2 100
hidden_blind_set ZOO_BLIND19 blind19
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output s50e
