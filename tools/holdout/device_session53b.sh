#!/usr/bin/env bash
# For the next lease (written in session 53, not run: no GPU started after its first calls).
#  1. the host's split of a step (issue #15): forward_modes.py (vision forwards with and without
#     autograd's recording, their backwards, batch 2) and phases.py over the reference gpt.py at
#     batch 1 and 8, between host anchors: the data to refit the per-op table's forward / backward
#     split (tools/holdout/real_h200/session53/README.md, "The other four");
#  2. on an H200 only: blind sets 22 and 21 (their H200 predictions recorded before any run, in
#     session52/ and session51/), measured hidden as device_session52.sh does, under LIMIT22 /
#     LIMIT21 s (default 200 / 160).
# Usage: tools/holdout/device_session53b.sh OUTDIR   (carry tools/holdout/_wl). Leaves OUTDIR.s53b.tgz.
out=$1; part=s53b
source "$(dirname "$0")/device_env.sh"
lease_start
anchor
(cd "$H" && timeout 150 python3 forward_modes.py --out "$out/forward_modes_b2.json" > "$out/forward_modes.log" 2>&1)
echo "forward_modes rc=$? $(( $(date +%s) - start ))s" >> "$log"
for b in 1 8; do
  seq=$([ $b = 1 ] && echo 64 || echo 1024)
  (cd "$H/_wl" && timeout 60 python3 ../phases.py gpt.py --batch $b --seq $seq --steps 12 2>&1 \
    | grep -E '^PHASES|median_steady' | sed "s/^/gpt_b$b /" >> "$log")
done
anchor
case "$gpu" in
  *H200*)
    timeout -k 10 "${LIMIT22:-200}" bash -c 'hidden_blind_set ZOO_BLIND22 blind22; exit 0'
    echo "blind22 rc=$? $(( $(date +%s) - start ))s" >> "$log"
    timeout -k 10 "${LIMIT21:-160}" bash -c 'hidden_blind_set ZOO_BLIND21 blind21; exit 0'
    echo "blind21 rc=$? $(( $(date +%s) - start ))s" >> "$log" ;;
esac
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output "$part"
