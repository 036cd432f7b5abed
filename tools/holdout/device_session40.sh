#!/usr/bin/env bash
# Session 40 (issue #15), on the GPU machine (torch 2.11): does DTensor's sharding propagation
# miss its cache every step under torch 2.11 (it does not under 2.13), in a real run and in the
# simulator run with the machine's own torch; the 1-GPU TP / FSDP examples real (unprofiled and
# profiled) and simulated with torch 2.11 (a CUDA build simulates no more GPUs than it sees: the
# 2-rank examples cannot be simulated there). Usage: device_session40.sh OUTDIR
set -u
out=$1; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/orjson-*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
log=$out/log.txt
python3 -c "import torch; print('torch', torch.__version__)" >> "$log" 2>&1
A="--layers 4 --dim 1024 --heads 16 --seq 1024 --batch 8"
M=tools/holdout/dtensor_prop_misses.py
run1() {  # name timeout cmd...: one rank under torchrun
  local name=$1 t=$2; shift 2
  timeout "$t" python3 -m torch.distributed.run --standalone --nproc-per-node=1 "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? $(grep -c PROPMISS "$out/$name.log")" >> "$log"
}
start=$(date +%s)
( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) > "$out/gpt_b1.log" 2>&1
echo "gpt_b1 rc=$? $(grep -o '"median_steady_ms": [0-9.]*' "$out/gpt_b1.log")" >> "$log"
for ex in tp fsdp; do
  run1 real_$ex 120 $M examples/$ex/train.py $A --steps 10
  run1 prof_$ex 150 phantora_prof/measure/capture_real.py profile --trace-dir "$out/traces_$ex" -- examples/$ex/train.py $A --steps 8
done
echo "real done $(( $(date +%s) - start ))s" >> "$log"
for ex in tp fsdp; do
  timeout 150 python3 -m phantora_prof --gpu h200 --out "$out/sim1_$ex" --nproc-per-node 1 torchrun --nproc-per-node 1 $M examples/$ex/train.py $A --steps 8 > "$out/sim1_$ex.log" 2>&1
  echo "sim1 $ex rc=$? $(( $(date +%s) - start ))s" >> "$log"
done
rm -f "$out"/sim1_*/run.pftrace
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
