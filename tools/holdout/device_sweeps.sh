#!/usr/bin/env bash
# Family sweeps on the GPU machine, one call: `sweep_families --only FAMILY` into
# OUTDIR/sweep/swNUM.pt.trace.json.gz for each NUM:FAMILY:SECONDS, the GPU's name and each
# sweep's rc and time in OUTDIR/logs_PART.txt, then OUTDIR.PART.tgz (device_env.sh's pack_output).
# Usage: tools/holdout/device_sweeps.sh OUTDIR PART NUM:FAMILY:SECONDS [...]
out=$1; part=$2; shift 2
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$log"
for s in "$@"; do
  IFS=: read -r num family seconds <<< "$s"
  sweep "$num" "$family" "$seconds"
done
echo "done $(( $(date +%s) - start ))s" >> "$log"
cat "$log"
pack_output "$part"
