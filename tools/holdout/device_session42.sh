#!/usr/bin/env bash
# Session 42's device run (issue #15), in order of priority (the session's device time was short):
# (a) interleave_cost.py on the GPU and on a CPU mesh: the warm set's calibration on this host
#     (runtime/host/warm_set.py);
# (b) dtensor_overhead.py plain / tp at 8 blocks with CPU hardware counters per phase
#     (hwcounters.py: perf_event_open from Python, no perf binary), counted from step 3; and at
#     tiny sizes (dim 64, seq 16) on a CPU (gloo) mesh and on the GPU: DTensor's own work in
#     context without CUDA against with it;
# (c) torch.save / torch.load of 64-512 MiB state dicts (save_time.py);
# (d) py-spy with native frames (blocking, 100 Hz) of tp at 8 blocks from step 3;
# (e) cold_ops.py with counters: the timed op's own cycles, instructions and misses per context.
# Usage: device_session42.sh OUTDIR   (from the repository root; run's carry: tools/holdout/_wl,
# .whl/py-spy.xz)
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
mkdir -p /tmp/site/bin && xz -dc .whl/py-spy.xz > /tmp/site/bin/py-spy && chmod +x /tmp/site/bin/py-spy
export PATH=/tmp/site/bin:$PATH
log=$out/log.txt
anchor() { ( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"; }
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517
echo "paranoid $(cat /proc/sys/kernel/perf_event_paranoid) cpu $(grep -m1 'model name' /proc/cpuinfo)" >> "$log"
anchor
for d in cuda cpu; do
  timeout 200 python3 tools/holdout/interleave_cost.py --device $d 2>&1 | grep -E "INTERLEAVE|Error" | sed "s/^/$d /" >> "$log"
done
P=tools/holdout/dtensor_overhead.py
for m in plain tp; do
  timeout 150 python3 $P --mode $m --layers 8 --steps 16 --counters 2>&1 | grep -E "OVERHEAD|COUNTERS|Error" >> "$log"
done
T="--dim 64 --heads 4 --seq 16 --batch 2 --vocab 512 --no-autocast --steps 30 --counters"
for d in cpu cuda; do for m in plain tp; do
  timeout 100 python3 $P --device $d --mode $m --layers 8 $T 2>&1 | grep -E "OVERHEAD|COUNTERS|Error" >> "$log"
done; done
echo "real $(timeout 200 python3 tools/holdout/save_time.py 2>&1 | grep -E 'SAVE|Error')" >> "$log"
anchor
timeout 200 python3 $P --mode tp --layers 8 --steps 24 --spy "$out/spy_native_tp8.txt" --spy-native 2>&1 | grep -E "OVERHEAD|Error" >> "$log"
gzip -f "$out/spy_native_tp8.txt"
timeout 200 python3 tools/holdout/cold_ops.py --counters 2>&1 | grep -E "COLD|COUNTERS|Error" >> "$log"
cat "$log"
