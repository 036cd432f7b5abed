#!/usr/bin/env bash
# Session 16 on the GPU machine (torch 2.11, CUDA build): reference data for issue #16 item 2,
# torch.compile(mode="reduce-overhead") (Inductor's CUDA graph trees).
#   PART a: cudagraph_host.py (host and GPU time per compiled call, default vs reduce-overhead,
#           fitted on) and profiled steps of the reference gpt.py --compile at batch 1 x 64 and 8
#           in both modes (trace format, kernel gaps inside a graph)
#   PART b: held out (chosen before any run, never fitted): zoo.py models compiled in both modes
#           at small, host-bound batches, 10 steps each, unprofiled
#   PART c: profiles of those cases (after they were compared), to see where the time goes
# Usage: tools/holdout/device_session16.sh OUTDIR PART WORKLOADS_DIR  (WORKLOADS_DIR: a copy of the
# reference workloads inside the working tree, so that it travels)
set -u
out=$1; part=$2; wl=${3:-}
source "$(dirname "$0")/device_env.sh"
tmp=$(mktemp -d)
if [ "$part" = a ]; then
  timeout 300 python3 "$H/cudagraph_host.py" --trace "$tmp" > "$out/cudagraph_host.log" 2>&1
  echo "== cudagraph_host rc=$?" >> "$log"
  for f in "$tmp"/lin8_*.json; do gzip -c "$f" > "$out/$(basename "$f").gz"; done
  for spec in "gpt_b1_ro:reduce-overhead:--batch 1 --seq 64" "gpt_b8_ro:reduce-overhead:" "gpt_b1_default:default:--batch 1 --seq 64"; do
    name=${spec%%:*}; rest=${spec#*:}; mode=${rest%%:*}; args=${rest#*:}
    (cd "$wl" && timeout 200 python3 "$H/compile_mode.py" "$mode" gpt.py --compile --steps 8 $args --profile-dir "$tmp/$name") > "$tmp/$name.log" 2>&1
    echo "== $name rc=$? $(grep '^RESULT' "$tmp/$name.log" | head -c 700)" >> "$log"
    f=$(ls "$tmp/$name"/*.pt.trace.json* 2>/dev/null | head -1)
    case "$f" in *.gz) cp "$f" "$out/$name.pt.trace.json.gz";; "") ;; *) gzip -c "$f" > "$out/$name.pt.trace.json.gz";; esac
  done
elif [ "$part" = c ]; then
  # profiles of the held-out zoo cases, after their comparison (compare_2026-12-03_ro.json)
  for spec in "hf_gpt2_b1_c:hf_gpt2:--batch 1 --seq 128" "timm_vit_b8_c:timm_vit:--batch 8" \
              "tv_resnet50_b8_c:tv_resnet50:--batch 8" "timm_vit_b8_ro:timm_vit:--batch 8 --compile-mode reduce-overhead" \
              "tv_resnet50_b8_ro:tv_resnet50:--batch 8 --compile-mode reduce-overhead"; do
    name=${spec%%:*}; rest=${spec#*:}; model=${rest%%:*}; args=${rest#*:}
    (cd "$H" && timeout 240 python3 zoo.py --model $model $args --compile --steps 8 --profile-dir "$tmp/$name" > "$tmp/$name.log" 2>&1)
    echo "== $name rc=$? $(grep '^RESULT' "$tmp/$name.log" | grep -o '"step_ms.*' | head -c 400)" >> "$log"
    f=$(ls "$tmp/$name"/*.pt.trace.json* 2>/dev/null | head -1)
    case "$f" in *.gz) cp "$f" "$out/$name.pt.trace.json.gz";; "") ;; *) gzip -c "$f" > "$out/$name.pt.trace.json.gz";; esac
  done
else
  python3 -c "import transformers, timm, torchvision; print('transformers', transformers.__version__, 'timm', timm.__version__, 'torchvision', torchvision.__version__)" >> "$log" 2>&1
  for spec in "hf_gpt2:--batch 1 --seq 128" "timm_vit:--batch 8" "tv_resnet50:--batch 8"; do
    name=${spec%%:*}; args=${spec#*:}
    for mode in default reduce-overhead; do
      m=""; [ "$mode" != default ] && m="--compile-mode $mode"
      (cd "$H" && timeout 240 python3 zoo.py --model $name $args --compile $m --steps 10 > "$tmp/$name.log" 2>&1)
      echo "== ${name} $mode rc=$? $(grep '^RESULT' "$tmp/$name.log" | head -c 900)" >> "$log"
      grep -i "error\|skipping cudagraphs" "$tmp/$name.log" | tail -3 >> "$log"
    done
  done
fi
cat "$log"
