#!/usr/bin/env bash
# Session 21 on the GPU machine: the 1-D and 3-D convolution family sweep (issue #14; blind6's
# wav2vec2 and r3d showed 1-D and 3-D convolutions priced from 2-D points), then the blind6
# models' host phases unprofiled (loop.py --host-probe).
# Usage: tools/holdout/device_session21.sh OUTDIR
out=$1; part=s21
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
python3 -m phantora_prof.measure.sweep_families --only conv1d,conv3d --out "$out/sweep_conv_nd.pt.trace.json.gz" \
  > "$out/sweep_conv_nd.log" 2>&1
echo "sweep rc=$? $(( $(date +%s) - start ))s $(tail -2 "$out/sweep_conv_nd.log" | head -1)"
for m in hf_whisper hf_clip timm_maxvit hf_wav2vec2 tv_r3d; do
  (cd "$H" && python3 zoo.py --model "$m" --steps 10 --host-probe) > "$out/phases_$m.log" 2>&1
  echo "$m rc=$? $(grep -o '"median_steady_ms": [0-9.]*' "$out/phases_$m.log")"
done
