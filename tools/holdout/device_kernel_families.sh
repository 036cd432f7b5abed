#!/usr/bin/env bash
# Issue #14, on the GPU machine: the kernel families the held-out diffs found unmeasured
# (tools/holdout/diff_real.py): grouped and strided depthwise convolutions, attention with a
# learned per-head bias, GEMMs with 4- / 8-byte aligned leading dimensions; and this lease's
# CPU and host probe. Results in OUTDIR (few files: the device tool brings back eight).
# Usage: tools/holdout/device_kernel_families.sh OUTDIR
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
tmp=$(mktemp -d)
{ lscpu; nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv; python3 -c \
  "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"; } > "$out/env.txt" 2>&1
python3 -m phantora_prof.measure.host_probe --out "$out/host_probe.json" > /dev/null 2>&1; echo "probe rc=$?"
python3 -m phantora_prof.measure.sweep_families --only conv_grouped,attention_bias \
  --out "$out/sw4.pt.trace.json.gz" 2>&1 | grep -v "^skip" | tail -3
python3 -m phantora_prof.measure.measure_kernels --only gemm_align --out "$tmp/ac.json" 2>&1 | tail -1
python3 -m phantora_prof.measure.measure_kernels --only gemm_align --warm-l2 --out "$tmp/aw.json" 2>&1 | tail -1
python3 -m phantora_prof.measure.measure_kernels --merge "$tmp/ac.json" "$tmp/aw.json" --out "$out/gemm_align.json" 2>&1 | tail -1
ls -la "$out"
