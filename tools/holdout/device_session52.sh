#!/usr/bin/env bash
# Session 52 (2026-12-07), one lease on whichever GPU comes (H100 or H200):
#  1. blind set 22 (compare.py's ZOO_BLIND22, chosen and committed before any run; its H200 and
#     H100 predictions recorded in real_h200/session52/ before this ran), measured hidden: results
#     only in files (OUTDIR/blind22_run.txt, OUTDIR/blind22/, traces/), under LIMIT22 s (default 250);
#  2. on an H200 only: the cuDNN RNN family again (sweep_families --only rnn, sw32) for the H200's
#     table, then blind set 21 (session 51's, whose H200 predictions were recorded before any run
#     and which only an H100 has measured), hidden the same way, under LIMIT21 s (default 160).
# Usage: tools/holdout/device_session52.sh OUTDIR   (carry tools/holdout/_wl). Leaves OUTDIR.s52.tgz.
out=$1; part=s52
source "$(dirname "$0")/device_env.sh"
lease_start
timeout -k 10 "${LIMIT22:-250}" bash -c 'hidden_blind_set ZOO_BLIND22 blind22; exit 0'
rc=$?; [ $rc -ne 0 ] && echo "limit blind22 rc=$rc $(( $(date +%s) - start ))s" >> "$log"
echo "blind22 $(( $(date +%s) - start ))s" >> "$log"
case "$gpu" in
  *H200*)
    sweep 32 rnn 45
    timeout -k 10 "${LIMIT21:-160}" bash -c 'hidden_blind_set ZOO_BLIND21 blind21; exit 0'
    rc=$?; [ $rc -ne 0 ] && echo "limit blind21 rc=$rc $(( $(date +%s) - start ))s" >> "$log" ;;
esac
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output "$part"
