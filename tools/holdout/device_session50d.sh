#!/usr/bin/env bash
# Session 50, fourth lease (issue #14): the fp32 NCHW batch norm family (sweep_families
# --only bn_nchw_fp32) into sweep/sw26.pt.trace.json.gz.
# Usage: tools/holdout/device_session50d.sh OUTDIR   Leaves OUTDIR.s50d.tgz.
exec "$(dirname "$0")/device_sweeps.sh" "$1" s50d 26:bn_nchw_fp32:300
