#!/usr/bin/env bash
# Session 41 (issue #15), on the GPU machine (torch 2.11): where does the real host time of the
# 1-GPU TP and FSDP examples go? py-spy samples the unprofiled step from outside the process (no
# torch.profiler inflation): Python frames only (self time of a Python function holds the C it
# calls) and with native frames; the simulator run with the machine's torch writes its counted
# Python per function (PHANTORA_PYHOST_PROFILE) for the same steps. Usage: device_session41.sh OUTDIR
set -u
out=$1; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/orjson-*.whl
mkdir -p /tmp/site/bin && xz -dc .whl/py-spy.xz > /tmp/site/bin/py-spy && chmod +x /tmp/site/bin/py-spy  # stripped binary of the py-spy 0.4.3 wheel
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
log=$out/log.txt
python3 -c "import torch; print('torch', torch.__version__)" >> "$log" 2>&1
nproc >> "$log"; lscpu | grep -i "model name" >> "$log"
A="--layers 4 --dim 1024 --heads 16 --seq 1024 --batch 8"
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511
start=$(date +%s)
( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) > "$out/gpt_b1.log" 2>&1
echo "gpt_b1 rc=$? $(grep -o '"median_steady_ms": [0-9.]*' "$out/gpt_b1.log")" >> "$log"
for ex in tp fsdp; do
  timeout 120 python3 examples/$ex/train.py $A --steps 40 > "$out/real_$ex.log" 2>&1
  echo "real_$ex rc=$? $(( $(date +%s) - start ))s" >> "$log"
  timeout 150 py-spy record --threads --nolineno --rate 500 --format raw -o "$out/spy_py_$ex.txt" -- python3 examples/$ex/train.py $A --steps 40 > "$out/spy_py_$ex.log" 2>&1
  echo "spy_py_$ex rc=$? $(( $(date +%s) - start ))s" >> "$log"
  timeout 200 py-spy record --threads --native --nolineno --rate 200 --format raw -o "$out/spy_native_$ex.txt" -- python3 examples/$ex/train.py $A --steps 40 > "$out/spy_native_$ex.log" 2>&1
  echo "spy_native_$ex rc=$? $(( $(date +%s) - start ))s" >> "$log"
done
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
for ex in tp fsdp; do
  PHANTORA_PYHOST_PROFILE=$out/pyhost_$ex timeout 170 python3 -m phantora_prof --gpu h200 --no-trace --out "$out/sim1_$ex" --nproc-per-node 1 torchrun --nproc-per-node 1 examples/$ex/train.py $A --steps 8 > "$out/sim1_$ex.log" 2>&1
  echo "sim1 $ex rc=$? $(( $(date +%s) - start ))s" >> "$log"
done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
