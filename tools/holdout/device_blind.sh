#!/usr/bin/env bash
# Issue #14, on the GPU machine: a blind set (chosen before any run, tools/holdout/compare.py
# ZOO_BLIND<N>), measured once after a session's changes, with this lease's GPU, library versions
# and host probe; with --profiles, then a profile of each model (a 5-step zoo.py run, steps 2-3
# recorded) in OUTDIR/traces/ for diff_real.py; --profiles-only: the profiles alone (a second
# device call where one call cannot hold both).
# Usage: tools/holdout/device_blind.sh OUTDIR SET CASES [--profiles|--profiles-only]
#   blind4 (session 10): tools/holdout/device_blind.sh OUT blind4 hf_starcoder2,hf_olmo,timm_resnext,tv_regnet_x
#   blind5 (session 11): tools/holdout/device_blind.sh OUT blind5 hf_falcon,timm_poolformer,tv_vgg,tv_mnasnet
#   blind8 (session 29), blind9 (session 32): through device_session29.sh / device_session32.sh, with --profiles
set -u
out=$1; set_name=$2; cases=$3; profiles=${4:-}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
H=$PWD/tools/holdout
start=$(date +%s)
if [ "$profiles" != --profiles-only ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv 2>&1
  python3 -c "import transformers, timm, torchvision; print('transformers', transformers.__version__, 'timm', timm.__version__, 'torchvision', torchvision.__version__)" 2>&1
  python3 -m phantora_prof.measure.host_probe --out "$out/host_probe_$set_name.json" > /dev/null 2>&1
  echo "probe rc=$? $(( $(date +%s) - start ))s"
  python3 "$H/compare.py" --real-gpu --only "$cases" --real-dir "$out"
  echo "timed $(( $(date +%s) - start ))s"
  [ "$profiles" = --profiles ] || exit 0
fi
mkdir -p "$out/traces"
for m in ${cases//,/ }; do
  tmp=$(mktemp -d)
  # the case's own arguments (compare.py CASES: Gemma-2 runs eager attention)
  args=$(python3 -c "import sys; sys.path.insert(0, '$H'); import compare; print(' '.join(compare.CASES['$m'][1]))")
  (cd "$H" && timeout 240 python3 zoo.py $args --steps 5 --profile-dir "$tmp") > "$out/profiled_$m.log" 2>&1
  rc=$?
  f=$(ls "$tmp"/*.pt.trace.json.gz 2>/dev/null | head -1)
  [ -n "$f" ] && cp "$f" "$out/traces/$m.pt.trace.json.gz"
  echo "profile $m rc=$rc $(( $(date +%s) - start ))s"
done
