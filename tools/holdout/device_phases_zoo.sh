#!/usr/bin/env bash
# Issue #15, on the GPU machine: unprofiled host time per phase (phases.py) of the zoo models
# whose GPU time the simulator gets right but whose step it makes too short (host-bound on the
# H200's host), with this lease's host probe.   Usage: tools/holdout/device_phases_zoo.sh OUTDIR
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
H=$PWD/tools/holdout
python3 -m phantora_prof.measure.host_probe --out "$out/host_probe.json" > /dev/null 2>&1; echo "probe rc=$?"
for m in hf_llama hf_qwen2 hf_gptneox tv_swin timm_convnext; do
  p=$(cd "$H" && timeout 240 python3 phases.py zoo.py --model $m --steps 10 2>&1 | grep '^PHASES ')
  echo "$m $p" | tee -a "$out/phases_zoo.txt"
done
