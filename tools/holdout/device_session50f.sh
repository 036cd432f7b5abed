#!/usr/bin/env bash
# Session 50, sixth lease (issue #14): fp32 NCHW grouped convolutions at RegNetX's stage shapes
# (sweep/sw29) and fp32 NCHW batch norm over more batch x map sizes (sweep/sw30).
# Usage: tools/holdout/device_session50f.sh OUTDIR   Leaves OUTDIR.s50f.tgz.
out=$1; part=s50f
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
sweep 29 regnet_grouped_fp32_nchw 200
sweep 30 bn_nchw_fp32_more 100
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output s50f
