#!/usr/bin/env bash
# Session 55: one script for whichever single GPU the lease brings (carry tools/holdout/_wl).
#  - every GPU: the forward timeline of the reference gpt.py at batch 8 x 1024 and 1 x 64
#    (forward_timeline.py: where the host's forward time goes, unprofiled; issue #15);
#  - an H200: blind sets 22 and 21 (predictions recorded before any run in session52/ and
#    session51/), measured hidden as device_session53b.sh does;
#  - an H100: device_session54.sh's compiled / eager pairs (issue #16).
# Usage: tools/holdout/device_session55.sh OUTDIR. Leaves OUTDIR.s55.tgz.
out=$1; part=s55
source "$(dirname "$0")/device_env.sh"
lease_start
anchor
for args in "" "--batch 1 --seq 64"; do
  echo "== forward_timeline $args" >> "$log"
  timeout 90 python3 "$H/forward_timeline.py" $args >> "$log" 2>&1
done
echo "timeline done $(( $(date +%s) - start ))s" >> "$log"
case "$gpu" in
  *H200*)
    limited_blind_set ZOO_BLIND22 blind22 "${LIMIT22:-200}"
    limited_blind_set ZOO_BLIND21 blind21 "${LIMIT21:-150}" ;;
  *)
    for m in eager compiled eager compiled; do
      echo "== compiled.py $m" >> "$log"
      timeout 120 python3 tests/scripts/compiled.py $m 2>&1 | tail -3 >> "$log"
    done
    for i in 1 2; do
      for c in "" "--compile"; do
        echo "== gpt b1 $c run $i" >> "$log"
        (cd "$H/_wl" && timeout 150 python3 gpt.py $c --batch 1 --seq 64 --steps 12 2>&1 \
          | grep -o '"median_steady_ms": [0-9.]*') >> "$log"
      done
    done ;;
esac
anchor
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output "$part"
