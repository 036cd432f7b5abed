#!/usr/bin/env bash
# Issue #14, on the GPU machine: column sums with few or unaligned columns (sweep_families
# reductions_cols), after the MLP-Mixer diff found a [49152, 196] bias gradient 4x slower
# than the reductions grid predicted.   Usage: tools/holdout/device_reductions_cols.sh OUTDIR
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m phantora_prof.measure.sweep_families --only reductions_cols --out "$out/sw6.pt.trace.json.gz" 2>&1 | tail -2
