#!/usr/bin/env bash
# For the next lease (carry tools/holdout/_wl): profiles of blind set 24 (timed in session 56 on an H100,
# all five short by 5-21%, gpt-oss and MiniMax GPU-bound) and their unprofiled phases, into OUTDIR/traces/
# and OUTDIR/phases24.txt; attn_bias_probe.py (the attention bias's cost at a GPT-2 shape) into
# OUTDIR/attn_bias_probe.txt; on an H200 also blind sets 23 and 24 timed hidden (their H200 predictions are
# in real_h200/session55/ and session56/) under LIMIT seconds each.
# Usage: tools/holdout/device_session56b.sh OUTDIR. Leaves OUTDIR.s56b.tgz.
out=$1; part=s56b
source "$(dirname "$0")/device_env.sh"
lease_start
anchor
cases=$(compare_py "','.join(compare.ZOO_BLIND24)")
profile_cases "$cases"
for m in ${cases//,/ }; do
  args=$(compare_py "' '.join(compare.CASES['$m'][1])")
  p=$(cd "$H" && timeout 120 python3 phases.py zoo.py $args --steps 10 2>&1 | grep -E '^PHASES ')
  echo "phases $m $p" >> "$out/phases24.txt"
done
echo "profiles and phases done $(( $(date +%s) - start ))s" >> "$log"
timeout 120 python3 "$H/attn_bias_probe.py" > "$out/attn_bias_probe.txt" 2>&1
echo "attn_bias_probe rc=$? $(( $(date +%s) - start ))s" >> "$log"
case "$gpu" in
  *H200*)
    limited_blind_set ZOO_BLIND24 blind24_h200 "${LIMIT:-200}"
    limited_blind_set ZOO_BLIND23 blind23_h200 "${LIMIT:-200}" ;;
esac
anchor
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output "$part"
