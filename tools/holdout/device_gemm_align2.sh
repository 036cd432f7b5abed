#!/usr/bin/env bash
# Issue #14, on the GPU machine: a denser sweep of GEMMs with 4- / 8-byte aligned leading
# dimensions (measure_kernels gemm_align2: 420 new random shapes), after the first 140
# (device_kernel_families.sh) left a held-out median error of 16%.
# Usage: tools/holdout/device_gemm_align2.sh OUTDIR
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
tmp=$(mktemp -d)
python3 -m phantora_prof.measure.measure_kernels --only gemm_align2 --out "$tmp/ac.json" 2>&1 | tail -1
python3 -m phantora_prof.measure.measure_kernels --only gemm_align2 --warm-l2 --out "$tmp/aw.json" 2>&1 | tail -1
python3 -m phantora_prof.measure.measure_kernels --merge "$tmp/ac.json" "$tmp/aw.json" --out "$out/gemm_align2.json" 2>&1 | tail -1
