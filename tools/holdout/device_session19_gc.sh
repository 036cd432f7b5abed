#!/usr/bin/env bash
# Issue #15, on the GPU machine: the cyclic garbage collector's share of real training steps
# (tools/holdout/gc_probe.py), each workload run as is and with gc.freeze() after step 3.
# Usage: tools/holdout/device_session19_gc.sh OUTDIR WORKLOADS_DIR PART   (PART: a or b)
set -u
out=$1; wl=$2; part=$3
. tools/holdout/device_env.sh
run() {  # name dir script args...
  local name=$1 dir=$2; shift 2
  for mode in plain freeze; do
    local extra=""
    [ $mode = freeze ] && extra="--freeze-at 3"
    local p
    p=$(cd "$dir" && MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 \
        timeout 150 python3 "$H/gc_probe.py" $extra "$@" 2>>"$log" | grep '^GCPROBE ')
    echo "$name $mode $p" >> "$out/gc_$part.txt"
    echo "$name $mode done $(date +%T)"
  done
}
E="--layers 4 --dim 1024 --heads 16 --seq 1024 --batch 8 --steps 16"
if [ "$part" = a ]; then
  run gpt "$wl" gpt.py --steps 16
  run gpt_b1 "$wl" gpt.py --batch 1 --seq 64 --steps 30
  run ex_tp "$PWD" examples/tp/train.py $E
  run ex_fsdp "$PWD" examples/fsdp/train.py $E
else
  run hf_llama "$H" zoo.py --model hf_llama --steps 16
  run tv_swin "$H" zoo.py --model tv_swin --steps 16
  run vit_b16 "$H" vit.py --batch 16 --steps 16
fi
