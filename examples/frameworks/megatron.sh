#!/usr/bin/env bash
# Megatron-core GPT pretraining (examples/frameworks/megatron/pretrain_gpt.py), unmodified,
# under phantora-prof (CPU-only).
#
#   examples/frameworks/megatron.sh NRANKS [extra pretrain_gpt.py args...]
#
# NRANKS (default 8) simulated GPUs on one node. TP and PP default to 2 each where the rank
# count allows (8 ranks: TP 2 x PP 2 x DP 2; 2 ranks: TP 2; 1 rank: none); pass --tp / --pp
# (and --layers, --hidden, --seq, --micro-batch-size, --steps, ...) to override.
# Set PHANTORA_ARGS for phantora-prof's own options (e.g. PHANTORA_ARGS="--gpu h100 --out /tmp/mg").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
nranks="${1:-8}"
shift || true
tp=1; pp=1
if (( nranks % 2 == 0 )); then tp=2; fi
if (( nranks % 4 == 0 )); then pp=2; fi
# shellcheck disable=SC2086
exec phantora-prof ${PHANTORA_ARGS:-} --nproc-per-node "$nranks" python "$here/megatron/pretrain_gpt.py" \
    --tp "$tp" --pp "$pp" "$@"
