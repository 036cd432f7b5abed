#!/usr/bin/env bash
# Session 18, part f: Float8 training (torchao, tensorwise scaling) of float8_mlp.py on the H200:
# bf16 and float8, eager and compiled, unprofiled (10 steps), then one profiled run of each float8
# case. torchao is not on the GPU machine: its wheel travels in ./_whl (pip download torchao).
# Usage: tools/holdout/device_session18_f8.sh OUTDIR
set -u
out=$1; part=f
source "$(dirname "$0")/device_env.sh"
pip install --no-deps --target /tmp/taolib _whl/torchao-*.whl -q >> "$log" 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/taolib
python3 -c "import torchao; print('torchao', torchao.__version__)" >> "$log" 2>&1
for c in "bf16:" "bf16_c:--compile" "f8:--float8" "f8_c:--float8 --compile"; do
  name=${c%%:*}; args=${c#*:}
  timeout 200 python3 "$H/float8_mlp.py" $args > "$out/float8_mlp_$name.log" 2>&1; echo "== $name rc=$?" >> "$log"
done
for c in "f8:--float8" "f8_c:--float8 --compile"; do
  name=${c%%:*}; args=${c#*:}; tmp=$(mktemp -d)
  timeout 200 python3 "$H/float8_mlp.py" $args --steps 6 --profile-dir "$tmp" > /dev/null 2>&1; echo "== profile $name rc=$?" >> "$log"
  f=$(ls "$tmp"/*.pt.trace.json* 2>/dev/null | head -1)
  case "$f" in *.gz) cp "$f" "$out/float8_mlp_$name.pt.trace.json.gz";; "") ;; *) gzip -c "$f" > "$out/float8_mlp_$name.pt.trace.json.gz";; esac
done
grep -h RESULT "$out"/float8_mlp_*.log | cut -c1-200 >> "$log"
cat "$log"
