#!/usr/bin/env bash
# Issue #15, on the GPU machine: host time per phase (forward, backward, optimizer; phases.py)
# of the reference gpt.py at several sizes, the held-out host-bound cases and the distributed
# examples at one GPU, with this lease's host probe. Everything in one call: leases differ by
# up to 2.3x in pure-Python speed.
# Usage: tools/holdout/device_phases.sh OUTDIR WORKLOADS_DIR   (WORKLOADS_DIR: the reference gpt.py)
set -u
out=$1; wl=$2
source "$(dirname "$0")/device_host_env.sh"
log=$out/phases.txt
run() {  # name dir script args...
  local name=$1 dir=$2; shift 2
  local p
  p=$(cd "$dir" && MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 \
      timeout 120 python3 "$H/phases.py" "$@" 2>&1 | grep '^PHASES ')
  echo "$name $p" | tee -a "$log"
}
E="--layers 4 --dim 1024 --heads 16 --seq 1024 --batch 8 --steps 10"
run gpt "$wl" gpt.py --steps 10
run gpt_b1 "$wl" gpt.py --batch 1 --seq 64 --steps 10
run gpt_b4 "$wl" gpt.py --batch 4 --steps 10
run gpt_tiny "$wl" gpt.py --layers 4 --dim 256 --heads 4 --seq 256 --batch 8 --steps 10
run mlp_small "$H" mlp.py --batch 256 --width 1024 --steps 10
run vit_b16 "$H" vit.py --batch 16 --steps 10
run cnn "$H" cnn.py --steps 10
for ex in ddp fsdp tp; do run "ex_$ex" "$PWD" examples/$ex/train.py $E; done
run ex_ddp_b1 "$PWD" examples/ddp/train.py --layers 4 --dim 1024 --heads 16 --seq 1024 --batch 1 --steps 10
