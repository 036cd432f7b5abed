#!/usr/bin/env bash
# Issue #15, on the GPU machine: one lease's host, measured together so that its speed is one
# number (leases differ by up to 2.3x in pure Python): host probe, the host-bound cases of
# `phantora-prof calibrate host` (phantora_prof/calibrate/host.py CASES), the DTensor per-op
# probe, the distributed examples' phases at one GPU (real), and the same examples simulated
# with this machine's torch (so the torch version is no confound).
# Usage: tools/holdout/device_host_lease.sh OUTDIR WORKLOADS_DIR   (WORKLOADS_DIR: the reference gpt.py)
# Writes OUTDIR/lease.tar.
set -u
out=$1; wl=$2
work=$(mktemp -d); mkdir -p "$work/cases"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/orjson-*.whl && export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 || exit 1
H=$PWD/tools/holdout
python3 -m phantora_prof.measure.host_probe --out "$work/host_probe.json" > "$work/host_probe.log" 2>&1
echo "probe rc=$?"
case_run() {  # name script args...
  local name=$1; shift
  ( cd "$(dirname "$1")" && timeout 120 python3 "$@" --steps 10 ) > "$work/cases/$name.log" 2>&1
  echo "$name rc=$? $(grep -o '"median_steady_ms": [0-9.]*' "$work/cases/$name.log")"
}
case_run gpt "$wl/gpt.py"
case_run gpt_b1 "$wl/gpt.py" --batch 1 --seq 64
case_run gpt_tiny "$wl/gpt.py" --layers 4 --dim 256 --heads 4 --seq 256 --batch 8
case_run gpt_b4 "$wl/gpt.py" --batch 4
case_run mlp_small "$H/mlp.py" --batch 256 --width 1024
case_run vit_b16 "$H/vit.py" --batch 16
case_run cnn "$H/cnn.py"
for c in loader0 loader4 trainer pyheavy; do case_run $c "$H/hostbound.py" --case $c; done
timeout 200 python3 "$H/dtensor_ops.py" --out "$work/dtensor_ops.json" > "$work/dtensor_ops.log" 2>&1
echo "dtensor_ops rc=$?"
A="--layers 4 --dim 1024 --heads 16 --seq 1024 --batch 8 --steps 10"
for ex in ddp fsdp tp; do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 \
    timeout 120 python3 "$H/phases.py" examples/$ex/train.py $A > "$work/real_$ex.log" 2>&1
  echo "real $ex rc=$? $(grep -h 'step 9' "$work/real_$ex.log")"
done
for ex in ddp fsdp tp; do
  PHANTORA_PYHOST_PROFILE="$work/pyhost_$ex" timeout 150 python3 -m phantora_prof --gpu h200 --host h200-2026-12-01 \
    --no-trace python3 "$H/phases.py" examples/$ex/train.py $A > "$work/sim_$ex.log" 2>&1
  echo "sim $ex rc=$? $(grep -h 'step 9' "$work/sim_$ex.log")"
done
tar -C "$work" -cf "$out/lease.tar" .
