#!/usr/bin/env bash
# Session 49's second GPU call (issues #14, #15): the unprofiled host phases (phases.py) of blind
# set 16, then session 44b's split of the tiny TP model's host time on the GPU (plain and tp under
# py-spy with native frames, all threads, 100 Hz: what DTensor's dispatch costs with CUDA, against
# the CPU-mesh split of tools/holdout/python_rates.py), the anchor before and after.
# Usage: tools/holdout/device_session49b.sh OUTDIR   (run's carry: tools/holdout/_wl, .whl/py-spy.xz)
out=$1; part=s49b
source "$(dirname "$0")/device_env.sh"
export HF_HUB_OFFLINE=1
start=$(date +%s)
mkdir -p /tmp/bin && xz -dc .whl/py-spy.xz > /tmp/bin/py-spy && chmod +x /tmp/bin/py-spy && export PATH=/tmp/bin:$PATH
anchor() { ( cd "$H/_wl" && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' | sed 's/^/anchor /' >> "$log"; }
anchor
for m in $(compare_py "' '.join(compare.ZOO_BLIND16)"); do
  p=$(cd "$H" && timeout 150 python3 phases.py zoo.py --model $m --steps 10 2>&1 | grep -E '^PHASES ')
  echo "phases $m $p" >> "$log"
done
echo "phases done $(( $(date +%s) - start ))s" >> "$log"
export OMP_NUM_THREADS=1 RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1
P=$H/dtensor_overhead.py
T="--dim 64 --heads 4 --seq 16 --batch 2 --vocab 512 --layers 8 --no-autocast"
port=29700
for m in plain tp; do
  port=$((port+1))
  echo "time_$m $(MASTER_PORT=$port timeout 120 python3 $P --mode $m $T --steps 40 2>&1 | grep -E 'OVERHEAD|Error')" >> "$log"
  port=$((port+1))
  echo "spy_$m $(MASTER_PORT=$port timeout 150 python3 $P --mode $m $T --steps 250 --spy $out/spyn_cuda_$m.txt --spy-native 2>&1 | grep -E 'OVERHEAD|Error')" >> "$log"
done
anchor
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output s49b
