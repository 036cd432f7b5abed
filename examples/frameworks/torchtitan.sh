#!/usr/bin/env bash
# torchtitan's llama3 debug model, unmodified, under phantora-prof (CPU-only).
#
#   examples/frameworks/torchtitan.sh NRANKS [extra torchtitan args...]
#
# Runs `python -m torchtitan.train --config llama3_debugmodel` (TORCHTITAN_CONFIG) on NRANKS
# simulated GPUs (default 1) with offline assets made by torchtitan/make_assets.py.
# Extra args go to torchtitan, e.g. `--parallelism.tensor_parallel_degree 2` or
# `--training.steps 20`; set PHANTORA_ARGS for phantora-prof's own options
# (e.g. PHANTORA_ARGS="--gpu h100 --out /tmp/tt_traces").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
nranks="${1:-1}"
shift || true
assets="${TORCHTITAN_ASSETS:-$repo/build/torchtitan_assets}"
python "$here/torchtitan/make_assets.py" "$assets" >/dev/null
dump="${TORCHTITAN_DUMP:-$(mktemp -d -t torchtitan_dump.XXXXXX)}"
# offline: the dataset and tokenizer are local files
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# titan_configs.py: torchtitan's llama3 configs plus a torch 2.13 compatibility alias
export PYTHONPATH="$here/torchtitan${PYTHONPATH:+:$PYTHONPATH}"
config="${TORCHTITAN_CONFIG:-llama3_debugmodel}"
# spmd_backend partial_dtensor: torchtitan 0.3.0's default ("spmd_types") hands FSDP plain
# tensors, which torch 2.13's fully_shard(dp_mesh_dims=...) refuses (also on real GPUs).
# shellcheck disable=SC2086
exec phantora-prof ${PHANTORA_ARGS:-} --nproc-per-node "$nranks" python -m torchtitan.train \
    --module titan_configs --config "$config" \
    --hf_assets_path "$assets/tokenizer" \
    --dataloader.dataset_path "$assets/dataset" \
    --dump_folder "$dump" \
    --parallelism.spmd_backend partial_dtensor \
    "$@"
