#!/usr/bin/env bash
# Session 50, sixth lease (issue #14): fp32 NCHW grouped convolutions at RegNetX's stage shapes
# (sweep/sw29) and fp32 NCHW batch norm over more batch x map sizes (sweep/sw30).
# Usage: tools/holdout/device_session50f.sh OUTDIR   Leaves OUTDIR.s50f.tgz.
exec "$(dirname "$0")/device_sweeps.sh" "$1" s50f 29:regnet_grouped_fp32_nchw:200 30:bn_nchw_fp32_more:100
