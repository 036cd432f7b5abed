#!/usr/bin/env bash
# Issue #16, on the GPU machine: torch.compile'd training steps (profiles and step times) and
# the Triton kernel sweep (triton_sweep.py).
# Usage: tools/holdout/device_compiled.sh OUTDIR PART
#   PART a: the reference gpt.py --compile (batch 8 and 32; copied into _wl/) and the sweep
#   PART b: held-out compiled models (zoo.py --compile), never used to fit anything
#   PART blind CASES: a compiled blind set (zoo.py --compile, comma-separated models), chosen
#           before any run, timed once (no profile), with the libraries' versions
#   PART c: unprofiled host time per phase (phases.py) of the compiled GPT (fit: the host time
#           of a compiled graph's launches) and of the held-out compiled models (compared only)
set -u
out=$1; part=$2
source "$(dirname "$0")/device_env.sh"
tmp=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
if [ "$part" = a ]; then
  for spec in "gpt_b8c:" "gpt_b32c:--batch 32"; do
    name=${spec%%:*}; args=${spec#*:}
    (cd _wl && timeout 300 python3 gpt.py --compile $args --steps 8 --profile-dir "$tmp/$name" > "$tmp/$name.log" 2>&1)
    echo "== $name rc=$? $(grep '^RESULT' "$tmp/$name.log" | head -c 600)" >> "$log"
    grep -v '^RESULT' "$tmp/$name.log" | tail -5 >> "$log"
    f=$(ls "$tmp/$name"/*.pt.trace.json* 2>/dev/null | head -1)
    [ -n "$f" ] && gzip -c "$f" > "$out/$name.pt.trace.json.gz"
  done
  timeout 420 python3 "$H/triton_sweep.py" --out "$out/triton_sweep.jsonl" > "$tmp/sweep.log" 2>&1
  echo "== sweep rc=$? $(wc -l < "$out/triton_sweep.jsonl") kernels" >> "$log"
  grep -i "failed\|error" "$tmp/sweep.log" | head -20 >> "$log"
elif [ "$part" = blind ]; then
  python3 -c "import transformers, timm, torchvision; print('transformers', transformers.__version__, 'timm', timm.__version__, 'torchvision', torchvision.__version__)" >> "$log" 2>&1
  for name in $(echo "$3" | tr ',' ' '); do
    (cd "$H" && timeout 200 python3 zoo.py --model $name --compile --steps 10 > "$tmp/$name.log" 2>&1)
    echo "== ${name}_c rc=$? $(grep '^RESULT' "$tmp/$name.log" | head -c 900)" >> "$log"
    grep -i "error" "$tmp/$name.log" | tail -3 >> "$log"
  done
elif [ "$part" = c ]; then
  for spec in "gpt_b8c:_wl/gpt.py --compile" "gpt_b32c:_wl/gpt.py --compile --batch 32" \
              "hf_llama_c:$H/zoo.py --model hf_llama --compile" "timm_vit_c:$H/zoo.py --model timm_vit --compile" \
              "tv_resnet50_c:$H/zoo.py --model tv_resnet50 --compile" "hf_bert_c:$H/zoo.py --model hf_bert --compile"; do
    name=${spec%%:*}; args=${spec#*:}
    p=$(cd "$(dirname "${args%% *}")" && timeout 200 python3 "$H/phases.py" $(basename "${args%% *}") ${args#* } --steps 10 2>&1 | grep -E '^PHASES |^step 9')
    echo "$name $p" >> "$log"
  done
else
  for name in hf_llama timm_vit tv_resnet50 hf_bert; do
    (cd "$H" && timeout 240 python3 zoo.py --model $name --compile --steps 10 --profile-dir "$tmp/$name" > "$tmp/$name.log" 2>&1)
    echo "== ${name}_c rc=$? $(grep '^RESULT' "$tmp/$name.log" | head -c 600)" >> "$log"
    grep -v '^RESULT' "$tmp/$name.log" | grep -v "^step" | tail -5 >> "$log"
    f=$(ls "$tmp/$name"/*.pt.trace.json.gz 2>/dev/null | head -1)
    [ -n "$f" ] && cp "$f" "$out/${name}_c.pt.trace.json.gz"
  done
fi
cat "$log"
