#!/usr/bin/env bash
# Session 18 on the GPU machine (torch 2.11, CUDA build): issue #16's host time of compiled calls.
#   PART a: the lease's host probe; compiled_host.py twice, unprofiled (run1 also writes profiled
#           traces of its training cases after their timed calls): chains of Triton kernels and
#           extern mms, and modules of 1..256 parameters (the cost per graph input)
#   PART b, c: the compiled fit and held-out cases again on this lease, 10 steps each, unprofiled
#           (b: gpt.py, hf_llama, timm_vit, tv_resnet50; c: hf_bert, flex hf_llama, blind2)
# Usage: tools/holdout/device_session18.sh OUTDIR PART   (run from the repository root; the
# reference workloads copied to ./_wl)
set -u
out=$1; part=$2
source "$(dirname "$0")/device_env.sh"
if [ "$part" = a ]; then
  python3 -m phantora_prof.measure.host_probe --out "$out/host_probe.json" > /dev/null 2>&1; echo "== probe rc=$?" >> "$log"
  tr=$(mktemp -d)
  python3 "$H/compiled_host.py" --ks 1,8,32,64 --calls 300 --trace-dir "$tr" > "$out/compiled_host_run1.log" 2>&1
  echo "== run1 rc=$?" >> "$log"
  python3 "$H/compiled_host.py" --ks 1,8,32,64 --calls 300 > "$out/compiled_host_run2.log" 2>&1
  echo "== run2 rc=$?" >> "$log"
  mkdir -p "$out/compiled_host_traces"
  for f in "$tr"/*.json; do gzip -c "$f" > "$out/compiled_host_traces/$(basename "$f").gz"; done
elif [ "$part" = b ]; then
  python3 "$H/compare.py" --real-gpu --workloads "$PWD/_wl" --only gpt_b8c,gpt_b32c,hf_llama_c,timm_vit_c,tv_resnet50_c \
    --real-dir "$out" >> "$log" 2>&1
  echo "== held b rc=$?" >> "$log"
else
  python3 "$H/compare.py" --real-gpu --workloads "$PWD/_wl" \
    --only hf_bert_c,hf_llama_fx_c,hf_opt_c,hf_qwen2_c,timm_resnext_c,tv_efficientnet_c --real-dir "$out" >> "$log" 2>&1
  echo "== held c rc=$?" >> "$log"
fi
cat "$log"
