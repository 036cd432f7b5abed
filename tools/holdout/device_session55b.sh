#!/usr/bin/env bash
# Session 55, second call (carry tools/holdout/_wl): the compiled MLP's peak memory per step
# (tests/scripts/compiled.py compiled_peaks / eager_peaks), then on an H200 the forward timeline of the reference
# gpt.py at batch 8 and blind sets 22 and 21 (hidden, as device_session53b.sh).
# Usage: tools/holdout/device_session55b.sh OUTDIR. Leaves OUTDIR.s55b.tgz.
out=$1; part=s55b
source "$(dirname "$0")/device_env.sh"
lease_start
for m in compiled_peaks eager_peaks compiled_peaks; do
  echo "== compiled.py $m" >> "$log"
  timeout 120 python3 tests/scripts/compiled.py $m 2>&1 | grep -E "^(step|peak)" >> "$log"
done
echo "peaks done $(( $(date +%s) - start ))s" >> "$log"
case "$gpu" in
  *H200*)
    anchor
    echo "== forward_timeline" >> "$log"
    timeout 90 python3 "$H/forward_timeline.py" >> "$log" 2>&1
    limited_blind_set ZOO_BLIND22 blind22 "${LIMIT22:-200}"
    limited_blind_set ZOO_BLIND21 blind21 "${LIMIT21:-150}" ;;
esac
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output "$part"
