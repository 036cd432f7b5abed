#!/usr/bin/env bash
# Session 21, issue #15: host time of blind6's host-bound models (whisper, CLIP, MaxViT) on one
# lease, next to the fitted reference gpt.py (batch 1, host-bound; batch 8) as that lease's host
# speed: unprofiled phases, then cProfile of the same run's main thread (phases.py --cprofile,
# cprofile_table.py), then blind6's timed steps again on this lease.
# Usage: tools/holdout/device_session21_host.sh OUTDIR WORKLOADS_DIR   (WORKLOADS_DIR: gpt.py)
set -u
out=$1; wl=$2
source "$(dirname "$0")/device_host_env.sh"
run_cprofiled gpt_b1 "$wl" gpt.py --batch 1 --seq 64
run_cprofiled gpt_b8 "$wl" gpt.py
run_cprofiled hf_whisper "$H" zoo.py --model hf_whisper
run_cprofiled timm_maxvit "$H" zoo.py --model timm_maxvit
run_cprofiled hf_clip "$H" zoo.py --model hf_clip
mkdir -p "$out/blind6"
python3 "$H/compare.py" --real-gpu --only hf_whisper,hf_wav2vec2,hf_clip,tv_r3d,timm_maxvit --real-dir "$out/blind6"
(cd "$out" && tar cf blind6_logs.tar blind6 && rm -r blind6)
ls -la "$out"
