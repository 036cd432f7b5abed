#!/usr/bin/env bash
# Issue #14, on the GPU machine: a blind set (chosen before any run, tools/holdout/compare.py
# ZOO_BLIND<N>), measured once after a session's changes, with this lease's host probe.
# Usage: tools/holdout/device_blind.sh OUTDIR SET CASES
#   blind4 (session 10): tools/holdout/device_blind.sh OUT blind4 hf_starcoder2,hf_olmo,timm_resnext,tv_regnet_x
#   blind5 (session 11): tools/holdout/device_blind.sh OUT blind5 hf_falcon,timm_poolformer,tv_vgg,tv_mnasnet
set -u
out=$1; set_name=$2; cases=$3
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m phantora_prof.measure.host_probe --out "$out/host_probe_$set_name.json" > /dev/null 2>&1; echo "probe rc=$?"
python3 tools/holdout/compare.py --real-gpu --only "$cases" --real-dir "$out"
