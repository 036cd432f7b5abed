#!/usr/bin/env bash
# Session 51 (issue #14): the cuDNN RNN family again (sweep_families --only rnn) into
# sweep/sw31.pt.trace.json.gz. The table's rnn points came from a 2026-12-01 sweep whose trace is
# not kept, made before calibrate families kept an op's busy time (2026-12-04): cuDNN runs a
# multi-layer RNN's kernels on streams of its own, and the points summed them (the zoo lstm's
# backward: 17.4 ms in the table, 11.7 ms busy in its real profile).
# Usage: tools/holdout/device_session51b.sh OUTDIR   Leaves OUTDIR.s51b.tgz.
exec "$(dirname "$0")/device_sweeps.sh" "$1" s51b 31:rnn:300
