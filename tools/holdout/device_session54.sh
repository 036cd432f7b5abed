#!/bin/bash
# Usage: tools/holdout/device_session54.sh OUTDIR   (from the repository root; carry tools/holdout/_wl)
# On an H200 the forward timeline (tools/holdout/forward_timeline.py) says whether the reference host runs ahead of its GPU at batch 8.
# session 54: compiled vs eager on the slow test's small MLP, and the reference gpt.py at batch 1 x 64 eager / compiled
out=$1; mkdir -p $out
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader > $out/log.txt
python3 -c "import torch; print(torch.__version__)" >> $out/log.txt
for i in 1 2; do
  for m in eager compiled; do
    echo "== compiled.py $m run $i" >> $out/log.txt
    timeout 200 python3 tests/scripts/compiled.py $m >> $out/log.txt 2>&1
  done
done
cd tools/holdout/_wl
for i in 1 2; do
  echo "== gpt b1 eager run $i" >> $out/log.txt
  timeout 100 python3 gpt.py --batch 1 --seq 64 --steps 12 2>&1 | grep -E "RESULT" | grep -o '"median_steady_ms": [0-9.]*' >> $out/log.txt
  echo "== gpt b1 compiled run $i" >> $out/log.txt
  timeout 200 python3 gpt.py --compile --batch 1 --seq 64 --steps 12 2>&1 | grep -E "RESULT" | grep -o '"median_steady_ms": [0-9.]*' >> $out/log.txt
done
cd ../../..
echo "== forward_timeline b8 / b1" >> $out/log.txt
timeout 90 python3 tools/holdout/forward_timeline.py >> $out/log.txt 2>&1
timeout 90 python3 tools/holdout/forward_timeline.py --batch 1 --seq 64 >> $out/log.txt 2>&1
echo "== compiled_host.py" >> $out/log.txt
timeout 280 python3 tools/holdout/compiled_host.py > $out/compiled_host_h100.log 2>&1; echo "compiled_host rc=$?" >> $out/log.txt
echo "done $(( $(date +%s) - start ))s" >> $out/log.txt
cat $out/log.txt
