#!/usr/bin/env bash
# Session 55's blind set 23 (carry tools/holdout/_wl): five timm architectures from
# tools/holdout/robustness.py, their H200 predictions recorded before any real run
# (real_h200/session55/blind23_predictions_h200.json), measured hidden as device_session53b.sh
# does (timed run, phases, profiles into OUTDIR/blind23/, nothing of it in the log). Best on an
# H200; on another GPU the log says which.
# Usage: tools/holdout/device_session55c.sh OUTDIR. Leaves OUTDIR.s55c.tgz.
out=$1; part=s55c
source "$(dirname "$0")/device_env.sh"
lease_start
limited_blind_set ZOO_BLIND23 blind23 "${LIMIT23:-420}"
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output "$part"
