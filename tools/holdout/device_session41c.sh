#!/usr/bin/env bash
# Session 41 (issue #15), on the GPU machine (torch 2.11): why does the real TP model's host time
# grow faster than its block count (dtensor_overhead.py: per block 2->4 blocks ~9 ms, 4->8 ~16 ms)?
# The collector's share (gc callbacks; and with gc disabled), and py-spy (Python frames, self time
# holds the C each frame calls) at 4 and 8 blocks. Usage: device_session41c.sh OUTDIR
set -u
out=$1; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/orjson-*.whl
mkdir -p /tmp/site/bin && xz -dc .whl/py-spy.xz > /tmp/site/bin/py-spy && chmod +x /tmp/site/bin/py-spy
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
log=$out/log.txt
anchor() { ( cd tools/holdout/_wl && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 | grep -o '"median_steady_ms": [0-9.]*' >> "$log"; }
P=tools/holdout/dtensor_overhead.py
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29513
anchor
for L in 2 4 8 12; do for g in on off; do
  echo "real $(timeout 120 python3 $P --mode tp --layers $L --gc $g --steps 14 2>&1 | grep OVERHEAD)" >> "$log"
done; done
for L in 8 12; do
  echo "real $(timeout 120 python3 $P --mode plain --layers $L --steps 14 2>&1 | grep OVERHEAD)" >> "$log"
done
for L in 4 8; do
  timeout 150 py-spy record --threads --nolineno --rate 500 --format raw -o "$out/spy_tp$L.txt" -- python3 $P --mode tp --layers $L --steps 30 > "$out/spy_tp$L.log" 2>&1
  echo "spy L=$L rc=$? $(grep OVERHEAD "$out/spy_tp$L.log")" >> "$log"
done
anchor
cat "$log"
