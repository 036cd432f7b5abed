#!/usr/bin/env bash
# Session 39 on the GPU machine (issue #15: DataLoader workers' batches in host time).
#   a: the host probe; the reference gpt.py at batch 1 x 64 (the host's speed, before and after);
#      hostbound.py's DataLoader / Trainer cases (fitted: loader0, loader4, trainer) and
#      loader_heldout.py's three cases (held out, simulated first: real_h200/session39/
#      loader_simulated_before.json), timed unprofiled, then each profiled; dataloader_probe.py
#      (the cost of moving a batch from a worker to the loop, with and without pinning)
# Usage: tools/holdout/device_session39.sh OUTDIR a WORKLOADS_DIR   (run's carry: tools/holdout/_wl)
# Leaves OUTDIR.<part>.tgz: everything the part wrote.
out=$1; part=s39$2
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
wl=$(cd "$3" && pwd)
case $2 in
  a)
    python3 -m phantora_prof.measure.host_probe --out "$out/host_probe.json" > /dev/null 2>&1
    (cd "$wl" && timeout 60 python3 gpt.py --batch 1 --seq 64) > "$out/gpt_b1_first.log" 2>&1
    for c in loader0 loader4 trainer; do
      (cd "$H" && timeout 60 python3 hostbound.py --case "$c" --steps 16) > "$out/hostbound_$c.log" 2>&1
      echo "hostbound $c rc=$? $(( $(date +%s) - start ))s" >> "$log"
    done
    for c in dict_text many_small images_nopin; do
      (cd "$H" && timeout 60 python3 loader_heldout.py --case "$c" --steps 16) > "$out/heldout_$c.log" 2>&1
      echo "heldout $c rc=$? $(( $(date +%s) - start ))s" >> "$log"
    done
    timeout 200 python3 "$H/dataloader_probe.py" --pin --out "$out/dataloader_probe.json" > "$out/dataloader_probe.log" 2>&1
    echo "probe rc=$? $(( $(date +%s) - start ))s" >> "$log"
    for c in loader4 trainer; do
      (cd "$H" && timeout 60 python3 hostbound.py --case "$c" --steps 8 --profile-dir "$out/prof_$c") > "$out/hostbound_prof_$c.log" 2>&1
    done
    for c in dict_text many_small images_nopin; do
      (cd "$H" && timeout 60 python3 loader_heldout.py --case "$c" --steps 16 --profile-dir "$out/prof_$c") > "$out/heldout_prof_$c.log" 2>&1
    done
    (cd "$wl" && timeout 60 python3 gpt.py --batch 1 --seq 64) > "$out/gpt_b1_last.log" 2>&1
    echo "done $(( $(date +%s) - start ))s" >> "$log" ;;
esac
pack_output "$2"
