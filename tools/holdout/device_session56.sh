#!/usr/bin/env bash
# Session 56 (carry tools/holdout/_wl): blind set 24 (five of robustness.py's language models, their
# H100 and H200 predictions recorded before any real run: real_h200/session56/blind24_predictions_*.json)
# timed once into OUTDIR/blind24/ with nothing of it in the log (no phases or profiles: the lease's
# time was short), then a profile of moe_qwen3_moe (timed earlier in the session) into OUTDIR/traces/ and
# the skinny-GEMM sweep (skinny_gemm_sweep.py) into OUTDIR/skinny_gemm.json.
# Usage: tools/holdout/device_session56.sh OUTDIR. Leaves OUTDIR.s56.tgz.
out=$1; part=s56
source "$(dirname "$0")/device_env.sh"
lease_start
anchor
cases=$(compare_py "','.join(compare.ZOO_BLIND24)")
timeout "${LIMIT24:-240}" python3 "$H/compare.py" --real-gpu --only "$cases" --real-dir "$out/blind24" > "$out/blind24_run.txt" 2>&1
echo "blind24 rc=$? $(( $(date +%s) - start ))s" >> "$log"
profile_cases moe_qwen3_moe
timeout 120 python3 "$H/skinny_gemm_sweep.py" "$out/skinny_gemm.json" > "$out/skinny_gemm.log" 2>&1
echo "skinny rc=$? $(( $(date +%s) - start ))s" >> "$log"
anchor
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output "$part"
