#!/usr/bin/env bash
# Session 47's second device call (issue #14): dilated depthwise convolutions (sweep_families
# --only conv_dw_dilated as sweep sw25), which LR-ASPP's H100 profile showed at 2.5 ms per
# forward against a 33 us roofline.
# Usage: tools/holdout/device_session47b.sh OUTDIR   Leaves OUTDIR.s47b.tgz.
out=$1; part=s47b
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
sweep 25 conv_dw_dilated 150
cat "$log"
pack_output s47b
