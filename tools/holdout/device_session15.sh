#!/usr/bin/env bash
# Session 15 on the GPU machine (torch 2.11, CUDA build): (1) the simulator on this torch with
# Dynamo loaded lazily (runtime/process/lazy_dynamo.py): a CUDA tensor's text, an eager step
# then torch.compile, the GPT example; (2) real reference for issue #16's mode="reduce-overhead":
# the reference gpt.py compiled in the default mode and with CUDA graphs, host-bound (batch 1,
# seq 64) and at batch 8, 10 steps each, and one profiled reduce-overhead run.
# Usage: tools/holdout/device_session15.sh OUTDIR WORKLOADS_DIR  (WORKLOADS_DIR: a copy of the reference workloads
# inside the working tree, so that it travels) and .whl/ holding an orjson wheel for the device's Python.
# Run 2026-12-03: tools/holdout/real_h200/session15/.
set -u
out=$1; wl=$2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/orjson-*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
python3 -V
python3 -c "import torch, click, rich, numba; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tail -1
sim() {  # name args...
  local name=$1; shift
  local t0=$(date +%s.%N)
  timeout 240 python3 -m phantora_prof --no-trace --log-level debug "$@" > "$out/sim_$name.log" 2>&1
  echo "sim $name rc=$? $(python3 -c "print(round($(date +%s.%N)-$t0,1))")s"
}
sim print python3 tests/scripts/behaviours.py cuda
sim eager_then_compiled python3 tests/scripts/compiled.py eager_then_compiled
sim gpt python3 examples/gpt/train.py --steps 3
grep -h "repr\|numpy\|dynamo\|disabled\|step 2\|Error" "$out"/sim_*.log | cut -c1-200 | head -30
cat > /tmp/ro.py <<'PY'
import os, runpy, sys, torch
mode = sys.argv.pop(1)
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
real = torch.compile
torch.compile = lambda m, *a, **k: real(m, *a, **{**k, **({"mode": mode} if mode != "default" else {})})
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
PY
real() {  # name mode args...
  local name=$1 mode=$2; shift 2
  ( cd "$wl" && timeout 200 python3 /tmp/ro.py "$mode" gpt.py --compile --steps 10 "$@" ) > "$out/real_$name.log" 2>&1
  echo "real $name rc=$? $(grep -o '"median_steady_ms": [0-9.]*' "$out/real_$name.log") $(grep -o '"peak_mem_bytes": [0-9]*' "$out/real_$name.log" | head -1)"
}
real b1_default default --batch 1 --seq 64
real b1_ro reduce-overhead --batch 1 --seq 64
real b8_default default
real b8_ro reduce-overhead
( cd "$wl" && timeout 200 python3 /tmp/ro.py reduce-overhead gpt.py --compile --steps 6 --batch 1 --seq 64 --profile-dir "$out/trace_b1_ro" ) > "$out/real_b1_ro_profiled.log" 2>&1
echo "profiled rc=$?"
ls -la "$out" "$out"/trace_b1_ro 2>/dev/null | head -20
