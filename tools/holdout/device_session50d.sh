#!/usr/bin/env bash
# Session 50, fourth lease (issue #14): the fp32 NCHW batch norm family (sweep_families
# --only bn_nchw_fp32) into sweep/sw26.pt.trace.json.gz.
# Usage: tools/holdout/device_session50d.sh OUTDIR   Leaves OUTDIR.s50d.tgz.
out=$1; part=s50d
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
sweep 26 bn_nchw_fp32 300
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output s50d
