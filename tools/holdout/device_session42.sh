#!/usr/bin/env bash
# Prepared in session 41 for the next device session (issue #15), not run yet (no device time left):
# (a) does the TP model's host work miss the CPU caches more than the plain model's? `perf stat`
#     counters of dtensor_overhead.py plain / tp at 4 and 8 blocks, if the VM exposes them;
# (b) torch.save / torch.load of 64-512 MiB state dicts from GPU and CPU tensors (save_time.py):
#     the simulator charges CPU-side serialisation nothing today.
# Usage: device_session42.sh OUTDIR   (from the repository root; reference workloads in tools/holdout/_wl)
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
log=$out/log.txt
anchor() { ( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"; }
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517
anchor
P=tools/holdout/dtensor_overhead.py
if command -v perf > /dev/null && perf stat -e cycles true > /dev/null 2>&1; then
  ctl=/tmp/perf_ctl; rm -f $ctl; mkfifo $ctl
  for L in 4 8; do for m in plain tp; do  # counted from step 3 on (the script enables perf through the fifo)
    perf stat -D -1 --control=fifo:$ctl -x, \
      -e cycles,instructions,cache-references,cache-misses,L1-dcache-load-misses,LLC-load-misses \
      -o "$out/perf_${m}$L.csv" timeout 150 python3 $P --mode $m --layers $L --steps 24 --perf-ctl $ctl >> "$log" 2>&1
  done; done
else
  echo "no usable perf on this machine" >> "$log"
fi
echo "real $(timeout 200 python3 tools/holdout/save_time.py 2>&1 | grep -E 'SAVE|Error')" >> "$log"
anchor
cat "$log"
