#!/usr/bin/env bash
# On the GPU machine: the mixture-of-experts held-out workload (tools/holdout/moe.py, HF Mixtral
# from a config), two configurations, timed, one profiled, and its allocator trace.
# Usage: tools/holdout/device_session20_moe.sh OUTDIR
set -u
out=$1; part=moe
. tools/holdout/device_env.sh
python3 -c "import transformers; print('transformers', transformers.__version__)" >> "$log" 2>&1
(cd "$H" && timeout 200 python3 moe.py --steps 12 --profile-dir "$out/moe_prof" > "$out/moe_e8k2.log" 2>&1)
(cd "$H" && timeout 200 python3 moe.py --steps 12 --experts 16 --top-k 2 --batch 8 > "$out/moe_e16k2_b8.log" 2>&1)
(cd "$H" && timeout 200 python3 memory_trace.py "$out/moe_mem_real.pickle" moe.py --steps 3 >> "$log" 2>&1)
gzip "$out/moe_mem_real.pickle"
mv "$out"/moe_prof/*.json.gz "$out/moe_e8k2.pt.trace.json.gz" && rmdir "$out/moe_prof"
ls -la "$out" >> "$log"
