#!/usr/bin/env bash
# Session 44's device run (issue #15): the cost per Python instruction, per file, in context on
# the GPU machine's host. For each workload: its Python counted per code object (count_python.py,
# two step counts), its unperturbed step time, and py-spy with native frames (100 Hz) over many
# steps; tools/holdout/python_rates.py turns them into ns per instruction per file. Workloads:
# the TP example's model plain / tp / fsdp at tiny sizes on a CPU (gloo) mesh, loader0's dataset
# alone (loader_loop.py) and a tiny HF GPT-2 on the CPU; the same model on the GPU (timing only).
# Usage: device_session44.sh OUTDIR   (from the repository root; run's carry: tools/holdout/_wl)
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
mkdir -p /tmp/bin && xz -dc .whl/py-spy.xz > /tmp/bin/py-spy && chmod +x /tmp/bin/py-spy && export PATH=/tmp/bin:$PATH
log=$out/log.txt
anchor() { ( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"; }
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1
echo "cpu $(grep -m1 'model name' /proc/cpuinfo) torch $(python3 -c 'import torch; print(torch.__version__)') $(python3 -V)" >> "$log"
anchor
P=tools/holdout/dtensor_overhead.py
T="--dim 64 --heads 4 --seq 16 --batch 2 --vocab 512 --layers 8 --no-autocast"
port=29600
for m in plain tp fsdp; do
  for n in 12 24; do
    port=$((port+1))
    MASTER_PORT=$port COUNT_OUT=$out/cnt_${m}_$n.json timeout 120 python3 tools/holdout/count_python.py $P --mode $m $T --device cpu --steps $n 2>&1 | grep -E "Error" >> "$log"
  done
  port=$((port+1))
  echo "time_$m $(MASTER_PORT=$port timeout 120 python3 $P --mode $m $T --device cpu --steps 40 2>&1 | grep -E 'OVERHEAD|Error')" >> "$log"
  port=$((port+1))
  echo "spy_$m $(MASTER_PORT=$port timeout 200 python3 $P --mode $m $T --device cpu --steps 400 --spy $out/spyn_$m.txt --spy-native 2>&1 | grep -E 'OVERHEAD|Error')" >> "$log"
  port=$((port+1))
  echo "cuda_$m $(MASTER_PORT=$port timeout 120 python3 $P --mode $m $T --steps 30 2>&1 | grep -E 'OVERHEAD|Error')" >> "$log"
done
anchor
L=tools/holdout/loader_loop.py
for n in 12 24; do COUNT_OUT=$out/cnt_loader_$n.json timeout 120 python3 tools/holdout/count_python.py $L --batches $n 2>&1 | grep Error >> "$log"; done
echo "time_loader $(timeout 120 python3 $L --batches 300 2>&1 | grep -E 'LOADER|Error')" >> "$log"
echo "spy_loader $(timeout 200 python3 $L --batches 3000 --spy $out/spyn_loader.txt 2>&1 | grep -E 'LOADER|Error')" >> "$log"
H=tools/holdout/hf_cpu_loop.py
for n in 12 24; do COUNT_OUT=$out/cnt_hf_$n.json timeout 120 python3 tools/holdout/count_python.py $H --steps $n 2>&1 | grep Error >> "$log"; done
echo "time_hf $(timeout 120 python3 $H --steps 60 2>&1 | grep -E 'HFLOOP|Error')" >> "$log"
echo "spy_hf $(timeout 200 python3 $H --steps 800 --spy $out/spyn_hf.txt 2>&1 | grep -E 'HFLOOP|Error')" >> "$log"
anchor
( cd "$out" && tar czf ../s44_data.tgz --exclude log.txt . ) && find "$out" -type f ! -name log.txt -delete
cat "$log"
