#!/usr/bin/env bash
# On the GPU machine: real CUDA allocator traces (torch.cuda.memory._record_memory_history) of
# the memory-history test script (the snapshot format, with stacks), the reference gpt.py
# (fitted) and three zoo models (tv_resnet50: dev; hf_falcon, tv_vgg: never looked at), to hold
# against the simulated allocator's traces (compare_memory_trace.py).
# Usage: tools/holdout/device_session20_memory.sh OUTDIR   (reference workloads copied to ./_wl)
set -u
out=$1; part=mem
. tools/holdout/device_env.sh
python3 tests/scripts/memory_history.py "$out/memhist_real.pickle" >> "$log" 2>&1
(cd _wl && timeout 150 python3 "$H/memory_trace.py" "$out/gpt_real.pickle" gpt.py --steps 3 >> "$log" 2>&1)
for m in tv_resnet50 hf_falcon tv_vgg; do
  timeout 150 python3 "$H/memory_trace.py" "$out/${m}_real.pickle" "$H/zoo.py" --model $m --steps 3 >> "$log" 2>&1
  echo "$m rc $? $(date +%T)" >> "$log"
done
gzip "$out"/*.pickle
ls -la "$out" >> "$log"
