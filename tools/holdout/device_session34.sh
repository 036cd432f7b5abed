#!/usr/bin/env bash
# Session 34 on the GPU machine (issue #15: host time of host-bound runs).
#   a: this lease's host probe; then each host-bound run (compare.py HOST_BOUND) for 8 unprofiled
#      steps with the per-phase host times (--host-probe) and a profile of three more steps
#      (one warm-up, two recorded: host/traces/<case>.pt.trace.json.gz), to see where the
#      forward's host time goes: inside the ops (dispatch) or between them (Python)
#   b: cProfile of the main thread of four of them (phases.py --cprofile, cprofile_table.py)
#   c: the anchor of the reference host on this lease: the reference gpt.py (WORKLOADS_DIR, as the
#      reference traces ran it: 8 steps, profile of steps 4-6) and at batch 1 / seq 64, unprofiled
#      phases and a profile of each; then the host-bound runs' unprofiled phases (phases.py)
#   d: the same host-bound runs and the anchor built in one process, steps interleaved
#      (host_interleaved.py, 15 rounds): twice as they come, once pinned to two cores
#   e: (not run in session 34: the lease's time ran out) the interleaved runs with one profiled step
#      of each case (host_interleaved.py --profile-dir): per-op host times of host-bound runs on the
#      reference's host, for host_interleaved.py --op-costs
# Usage: tools/holdout/device_session34.sh OUTDIR a|b|c|d|e [WORKLOADS_DIR]
out=$1; part=s34$2
source "$(dirname "$0")/device_env.sh"
start=$(date +%s)
mkdir -p "$out/host/traces"
if [ "$2" = a ]; then
  python3 -m phantora_prof.measure.host_probe --out "$out/host/host_probe_host34.json" > /dev/null 2>&1
  echo "probe rc=$? $(( $(date +%s) - start ))s" >> "$log"
  for case in $(compare_py "' '.join(compare.HOST_BOUND)"); do
    args=$(compare_py "' '.join(compare.CASES['$case'][1])")
    tmp=$(mktemp -d)
    (cd "$H" && timeout 120 python3 zoo.py $args --steps 8 --host-probe --profile-dir "$tmp") > "$out/host/$case.log" 2>&1
    rc=$?
    f=$(ls "$tmp"/*.pt.trace.json.gz 2>/dev/null | head -1)
    [ -n "$f" ] && cp "$f" "$out/host/traces/$case.pt.trace.json.gz"
    echo "$case rc=$rc $(( $(date +%s) - start ))s" >> "$log"
  done
elif [ "$2" = c ]; then
  wl=$(cd "$3" && pwd)
  python3 -m phantora_prof.measure.host_probe --out "$out/host/host_probe_c.json" > /dev/null 2>&1
  echo "probe rc=$? $(( $(date +%s) - start ))s" >> "$log"
  mkdir -p "$out/anchor"
  for spec in "gpt:" "gpt_b1:--batch 1 --seq 64"; do
    name=${spec%%:*}; args=${spec#*:}
    (cd "$wl" && timeout 60 python3 "$H/phases.py" gpt.py $args --steps 12) > "$out/anchor/phases_$name.log" 2>&1
    (cd "$wl" && timeout 60 python3 gpt.py $args --steps 8 --profile-dir "$out/anchor/$name") > "$out/anchor/profiled_$name.log" 2>&1
    echo "anchor $name rc=$? $(( $(date +%s) - start ))s" >> "$log"
  done
  host_bound_phases "$out/host/phases_c.txt"
  echo "phases $(( $(date +%s) - start ))s" >> "$log"
elif [ "$2" = d ]; then
  wl=$(cd "$3" && pwd)
  python3 -m phantora_prof.measure.host_probe --out "$out/host/host_probe_d.json" > /dev/null 2>&1
  for run in 1 2 pinned; do
    pin=""; [ $run = pinned ] && pin="taskset -c 2,3"
    timeout 170 $pin python3 "$H/host_interleaved.py" --gpt-dir "$wl" --out "$out/host/interleaved_$run.json" \
      > "$out/host/interleaved_$run.log" 2>&1
    echo "interleaved $run rc=$? $(( $(date +%s) - start ))s" >> "$log"
  done
elif [ "$2" = e ]; then
  wl=$(cd "$3" && pwd)
  all=gpt_b1,$(compare_py "','.join(compare.HOST_BOUND + compare.HOST_BOUND_BLIND)")
  timeout 400 python3 "$H/host_interleaved.py" --gpt-dir "$wl" --only "$all" --rounds 10 \
    --out "$out/host/interleaved_profiled.json" --profile-dir "$out/host/interleaved_traces" \
    > "$out/host/interleaved_profiled.log" 2>&1
  echo "interleaved profiled rc=$? $(( $(date +%s) - start ))s" >> "$log"
else
  for case in host_hf_gpt2 host_timm_bit host_hf_swinv2 host_tv_resnet50; do
    args=$(compare_py "' '.join(compare.CASES['$case'][1])")
    (cd "$H" && timeout 90 python3 phases.py --cprofile "$out/host/$case.prof" zoo.py $args --steps 12 \
      > "$out/host/cprofile_$case.log" 2>&1 && python3 cprofile_table.py "$out/host/$case.prof" --steps 9 \
      --out "$out/host/cprofile_$case.json")
    echo "cprofile $case rc=$? $(( $(date +%s) - start ))s" >> "$log"
    rm -f "$out/host/$case.prof"
  done
fi
