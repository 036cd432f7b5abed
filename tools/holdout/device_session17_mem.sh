#!/usr/bin/env bash
# Session 17, part d: why compiled HF LMs' peak memory is under-predicted (hf_gpt2_c -20%,
# hf_bert_c -9%, hf_llama_c -7%, while eager is exact): AOTAutograd's graphs (what the forward
# saves for the backward) and Inductor's generated code (when buffers are allocated and freed),
# from TORCH_LOGS, for each model compiled, 2 steps.
# Usage: tools/holdout/device_session17_mem.sh OUTDIR   (the same under phantora-prof: PHANTORA=1)
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
H=$PWD/tools/holdout
run=(python3)
[ "${PHANTORA:-}" = 1 ] && run=(python3 -m phantora_prof --no-trace --gpu h200 python)
for m in hf_gpt2 hf_bert hf_llama; do
  (cd "$H" && TORCH_LOGS=aot_graphs,output_code timeout 280 "${run[@]}" zoo.py --model $m --compile --steps 2 \
     > "$out/${m}_c_mem.out" 2> "$out/${m}_c_mem.err")
  echo "== $m rc=$? $(grep -o '"peak_mem_bytes": [0-9]*' "$out/${m}_c_mem.out")"
  gzip -f "$out/${m}_c_mem.err"
done
