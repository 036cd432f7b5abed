#!/usr/bin/env bash
# Session 44's second device run (issue #15): session 43's H200 timeline (device_session43b.sh:
# the reference gpt.py's host forward / backward split on the H200 machine itself), then the tiny
# TP model plain / tp on the GPU under py-spy with native frames (all threads, 100 Hz): what the
# C++ side of DTensor's dispatch costs with CUDA, against tools/holdout/python_rates.py's split.
# Usage: device_session44b.sh OUTDIR   (from the repository root; run's carry: tools/holdout/_wl, .whl/py-spy.xz)
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
mkdir -p /tmp/bin && xz -dc .whl/py-spy.xz > /tmp/bin/py-spy && chmod +x /tmp/bin/py-spy && export PATH=/tmp/bin:$PATH
mkdir -p "$out/h200_timeline"; : > "$out/h200_timeline/log.txt"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 240 bash tools/holdout/device_session43b.sh "$out/h200_timeline" > /dev/null 2>&1
fi
( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$out/log.txt"
log=$out/log.txt
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1
P=tools/holdout/dtensor_overhead.py
T="--dim 64 --heads 4 --seq 16 --batch 2 --vocab 512 --layers 8 --no-autocast"
port=29700
for m in plain tp; do
  port=$((port+1))
  echo "time_$m $(MASTER_PORT=$port timeout 120 python3 $P --mode $m $T --steps 40 2>&1 | grep -E 'OVERHEAD|Error')" >> "$log"
  port=$((port+1))
  echo "spy_$m $(MASTER_PORT=$port timeout 150 python3 $P --mode $m $T --steps 250 --spy $out/spyn_cuda_$m.txt --spy-native 2>&1 | grep -E 'OVERHEAD|Error')" >> "$log"
done
( cd "$out" && tar czf ../s44b_data.tgz spyn_cuda_*.txt ) && rm -f "$out"/spyn_cuda_*.txt
( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"
cat "$out/h200_timeline/log.txt" "$log"
