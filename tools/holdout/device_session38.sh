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
case $2 in
  a)
    sweep 16 conv_unaligned 150
    timeout 400 bash "$H/device_blind.sh" "$out/blind13" blind13 "$(compare_py "','.join(compare.ZOO_BLIND13)")" \
      --profiles > "$out/blind13.log" 2>&1
    echo "blind13 rc=$? $(( $(date +%s) - start ))s" >> "$log" ;;
  b)
    bash "$H/device_session34.sh" "$out" e "$wl"
    echo "part e done $(( $(date +%s) - start ))s" >> "$log" ;;
  c) sweep 17 conv_maps 200 ;;
  d) sweep 18 upsample 200 ;;
  cd) sweep 17 conv_maps 200; sweep 18 upsample 200 ;;
  e) sweep 19 upsample_pool 120 ;;
esac
pack_output "$2"
