#!/usr/bin/env bash
# Session 51 (2026-12-07): blind set 21 (session 50's training recipes on other models, compare.py's
# ZOO_BLIND21) measured on an H200: the host anchor, the set timed once (10 steps, unprofiled), its
# unprofiled phases, the anchor again, then profiles (5 steps), written to files only: the tail of
# this run shows nothing of the blind set, whose logs are opened after its simulation has run.
# The measurement runs under a limit (LIMIT seconds, default 500) so that the output is packed
# inside the device call's 600 s even if a case hangs (what finished by then is kept; the log
# says "limit" if it was hit).
# Usage: tools/holdout/device_session51.sh OUTDIR   (carry tools/holdout/_wl). Leaves OUTDIR.s51.tgz.
out=$1; part=s51
source "$(dirname "$0")/device_env.sh"
lease_start
timeout -k 10 "${LIMIT:-500}" bash -c 'hidden_blind_set ZOO_BLIND21 blind21; exit 0'
rc=$?
[ $rc -ne 0 ] && echo "limit rc=$rc $(( $(date +%s) - start ))s" >> "$log"
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output s51
ls -la "$(dirname "$out")"
