#!/usr/bin/env bash
# Issue #14, on the GPU machine: the blind set 5 (chosen before any run, tools/holdout/compare.py
# ZOO_BLIND5), measured once after session 11's changes, with this lease's host probe.
# Usage: tools/holdout/device_blind5.sh OUTDIR
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m phantora_prof.measure.host_probe --out "$out/host_probe_blind5.json" > /dev/null 2>&1; echo "probe rc=$?"
python3 tools/holdout/compare.py --real-gpu --only hf_falcon,timm_poolformer,tv_vgg,tv_mnasnet --real-dir "$out"
