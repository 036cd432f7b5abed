#!/usr/bin/env bash
# Issue #15, on the GPU machine: where the main thread's host time goes in real runs of models
# whose simulated forward is too short (tv_swin, timm_convnext, tv_efficientnet) and of the
# fitted reference gpt.py at batch 1 (the baseline): unprofiled phases, then cProfile of the
# same run's steps 4..12 (phases.py --cprofile) as JSON rows per step (cprofile_table.py).
# Usage: tools/holdout/device_cprofile_zoo.sh OUTDIR WORKLOADS_DIR   (WORKLOADS_DIR: gpt.py)
set -u
out=$1; wl=$2
H=$PWD/tools/holdout
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m phantora_prof.measure.host_probe --out "$out/host_probe.json" > /dev/null 2>&1
echo "probe rc=$?"
run() {  # name dir script args...
  local name=$1 dir=$2; shift 2
  local p
  p=$(cd "$dir" && timeout 150 python3 "$H/phases.py" "$@" --steps 12 2>&1 | grep '^PHASES ')
  echo "$name plain $p" | tee -a "$out/phases.txt"
  p=$(cd "$dir" && timeout 150 python3 "$H/phases.py" --cprofile /tmp/$name.prof "$@" --steps 12 2>&1 | grep '^PHASES ')
  echo "$name cprofile $p" | tee -a "$out/phases.txt"
  python3 "$H/cprofile_table.py" /tmp/$name.prof --steps 9 --out "$out/cprof_$name.json"
}
run gpt_b1 "$wl" gpt.py --batch 1 --seq 64
run tv_swin "$H" zoo.py --model tv_swin
run timm_convnext "$H" zoo.py --model timm_convnext
run tv_efficientnet "$H" zoo.py --model tv_efficientnet
run vit "$H" vit.py
ls -la "$out"
