#!/usr/bin/env bash
# Issue #14, on the GPU machine: grouped convolutions of group widths that are not powers of two
# (sweep_families conv_grouped2), after device_kernel_families.sh found cuDNN padding them.
# Usage: tools/holdout/device_grouped_conv2.sh OUTDIR
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m phantora_prof.measure.sweep_families --only conv_grouped2 --out "$out/sw5.pt.trace.json.gz" 2>&1 \
  | grep -v "^skip" | tail -2
