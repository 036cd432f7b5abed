#!/usr/bin/env bash
# DeepSpeed ZeRO (stage 1, 2 or 3) on examples/gpt's GPT, unmodified, under phantora-prof.
#
#   examples/frameworks/deepspeed.sh NRANKS [STAGE] [extra train.py args...]
#
# Runs examples/frameworks/deepspeed/train.py on NRANKS simulated GPUs (default 2) with ZeRO
# stage STAGE (default 2). Extra args go to the script, e.g. `--layers 4 --steps 5`,
# `--breakdown` (DeepSpeed's wall_clock_breakdown) or `--comms-logger`; set PHANTORA_ARGS for
# phantora-prof's own options (e.g. PHANTORA_ARGS="--gpu h100 --out /tmp/ds_traces").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
nranks="${1:-2}"
stage="${2:-2}"
shift $(( $# > 2 ? 2 : $# )) || true
# shellcheck disable=SC2086
exec phantora-prof ${PHANTORA_ARGS:-} --nproc-per-node "$nranks" python "$here/deepspeed/train.py" \
    --zero-stage "$stage" "$@"
