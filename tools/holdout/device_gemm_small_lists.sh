#!/usr/bin/env bash
# Issues #14 and #15, on the GPU machine: (1) the sweep gemm_small (measure_kernels: batched
# GEMMs of many small matrices, mm / addmm with one small dimension; cold and warm L2, merged),
# (2) host time per call of tensor-list ops by list length (phantora_prof.measure.host_lists),
# with this lease's host probe.   Usage: tools/holdout/device_gemm_small_lists.sh OUTDIR
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
tmp=$(mktemp -d)
python3 -m phantora_prof.measure.measure_kernels --only gemm_small --out "$tmp/sc.json" 2>&1 | tail -1
python3 -m phantora_prof.measure.measure_kernels --only gemm_small --warm-l2 --out "$tmp/sw.json" 2>&1 | tail -1
python3 -m phantora_prof.measure.measure_kernels --merge "$tmp/sc.json" "$tmp/sw.json" --out "$out/gemm_small.json" 2>&1 | tail -1
python3 -m phantora_prof.measure.host_probe --out "$out/host_probe.json" > /dev/null 2>&1; echo "probe rc=$?"
python3 -m phantora_prof.measure.host_lists --out "$out/host_lists.json" 2>&1 | tail -2
python3 -m phantora_prof.measure.host_lists --out "$out/host_lists_again.json" 2>&1 | tail -1
