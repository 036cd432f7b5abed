#!/usr/bin/env bash
# Session 41 (issue #15), on the GPU machine (torch 2.11): where a real TP step's host time goes
# once warm: dtensor_overhead.py with py-spy attached from step 3 (Python frames with lines,
# non-blocking sampling), at 4 and 8 blocks and plain at 8, one OpenMP thread as under torchrun.
# Usage: device_session41d.sh OUTDIR
set -u
out=$1; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/orjson-*.whl
mkdir -p /tmp/site/bin && xz -dc .whl/py-spy.xz > /tmp/site/bin/py-spy && chmod +x /tmp/site/bin/py-spy
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH OMP_NUM_THREADS=1
log=$out/log.txt
anchor() { ( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"; }
P=tools/holdout/dtensor_overhead.py
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29514
anchor
for L in 4 8; do
  echo "real $(timeout 120 python3 $P --mode tp --layers $L --steps 14 2>&1 | grep OVERHEAD)" >> "$log"
done
for c in "tp 4 40" "tp 8 24" "plain 8 40"; do
  set -- $c
  echo "spy $(timeout 150 python3 $P --mode $1 --layers $2 --steps $3 --spy "$out/spy_$1$2.txt" 2>&1 | grep OVERHEAD)" >> "$log"
  gzip -f "$out/spy_$1$2.txt"
done
anchor
cat "$log"
