#!/usr/bin/env bash
# Issue #15, on the GPU machine: where the main thread's host time goes in real runs of models
# whose simulated forward is too short (tv_swin, timm_convnext, tv_efficientnet) and of the
# fitted reference gpt.py at batch 1 (the baseline): unprofiled phases, then cProfile of the
# same run's steps 4..12 (phases.py --cprofile) as JSON rows per step (cprofile_table.py).
# Usage: tools/holdout/device_cprofile_zoo.sh OUTDIR WORKLOADS_DIR   (WORKLOADS_DIR: gpt.py)
set -u
out=$1; wl=$2
source "$(dirname "$0")/device_host_env.sh"
run_cprofiled gpt_b1 "$wl" gpt.py --batch 1 --seq 64
run_cprofiled tv_swin "$H" zoo.py --model tv_swin
run_cprofiled timm_convnext "$H" zoo.py --model timm_convnext
run_cprofiled tv_efficientnet "$H" zoo.py --model tv_efficientnet
run_cprofiled vit "$H" vit.py
ls -la "$out"
