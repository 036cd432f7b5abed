#!/usr/bin/env bash
# Session 38 on the GPU machine.
#   a: the conv_unaligned kernel family (sweep sw16: dense convolutions over channel counts that are
#      not multiples of 8, which cuDNN pads; blind set 11's HRNet was -40.6% in GPU time without
#      them), then blind set 13 (compare.py ZOO_BLIND13, simulated first:
#      real_h200/session38/blind13_simulated_*.json) timed once and profiled
#   b: session 34's part e (host_interleaved.py with one profiled step per case, for --op-costs)
#   d: the upsample family again (sw18: with 2- and 3-channel maps; its points replace the H200
#      table's upsample points, which lacked the scale as a feature: RAFT's x8 flow upsampling
#      backward 156 us real against 34 us simulated)
#   e: upsampling from pooled grids (sw19: x10..x64; DeepLabV3's ASPP pooling branch, 2.2 ms real
#      per backward against 32 us from the x8 points)
#   c: the conv_maps kernel family (sweep sw17: maps the conv grid lacks, asymmetric kernels;
#      blind set 11's Inception-v3 was -23% in convolution time without them)
# Usage: tools/holdout/device_session38.sh OUTDIR a|b|c|d|cd|e WORKLOADS_DIR   (run's carry: tools/holdout/_wl)
# Leaves OUTDIR.<part>.tgz (split in 15 MiB pieces when larger): everything the part wrote.
out=$1; part=s38$2
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
wl=$(cd "$3" && pwd)
if [ "$2" = a ]; then
  mkdir -p "$out/sweep"
  timeout 150 python3 -m phantora_prof.measure.sweep_families --only conv_unaligned \
    --out "$out/sweep/sw16.pt.trace.json.gz" > "$out/sweep/sw16.log" 2>&1
  echo "sweep sw16 conv_unaligned rc=$? $(( $(date +%s) - start ))s" >> "$log"
  timeout 400 bash "$H/device_blind.sh" "$out/blind13" blind13 "$(compare_py "','.join(compare.ZOO_BLIND13)")" \
    --profiles > "$out/blind13.log" 2>&1
  echo "blind13 rc=$? $(( $(date +%s) - start ))s" >> "$log"
elif [ "$2" = c ] || [ "$2" = cd ]; then
  mkdir -p "$out/sweep"
  timeout 200 python3 -m phantora_prof.measure.sweep_families --only conv_maps \
    --out "$out/sweep/sw17.pt.trace.json.gz" > "$out/sweep/sw17.log" 2>&1
  echo "sweep sw17 conv_maps rc=$? $(( $(date +%s) - start ))s" >> "$log"
fi
if [ "$2" = d ] || [ "$2" = cd ]; then
  mkdir -p "$out/sweep"
  timeout 200 python3 -m phantora_prof.measure.sweep_families --only upsample \
    --out "$out/sweep/sw18.pt.trace.json.gz" > "$out/sweep/sw18.log" 2>&1
  echo "sweep sw18 upsample rc=$? $(( $(date +%s) - start ))s" >> "$log"
elif [ "$2" = e ]; then
  mkdir -p "$out/sweep"
  timeout 120 python3 -m phantora_prof.measure.sweep_families --only upsample_pool \
    --out "$out/sweep/sw19.pt.trace.json.gz" > "$out/sweep/sw19.log" 2>&1
  echo "sweep sw19 upsample_pool rc=$? $(( $(date +%s) - start ))s" >> "$log"
elif [ "$2" = b ]; then
  bash "$H/device_session34.sh" "$out" e "$wl"
  echo "part e done $(( $(date +%s) - start ))s" >> "$log"
fi
tar czf "$out.$2.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
if [ "$(stat -c %s "$out.$2.tgz")" -gt 15728640 ]; then
  split -b 15m -d "$out.$2.tgz" "$out.$2.tgz." && rm "$out.$2.tgz"
fi
