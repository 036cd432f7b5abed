#!/usr/bin/env bash
# Issue #14, on the GPU machine: the blind set 4 (chosen before any run, tools/holdout/compare.py
# ZOO_BLIND4), measured once after session 10's changes, with this lease's host probe.
# Usage: tools/holdout/device_blind4.sh OUTDIR
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m phantora_prof.measure.host_probe --out "$out/host_probe_blind4.json" > /dev/null 2>&1; echo "probe rc=$?"
python3 tools/holdout/compare.py --real-gpu --only hf_starcoder2,hf_olmo,timm_resnext,tv_regnet_x --real-dir "$out"
