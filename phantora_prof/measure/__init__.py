"""Measuring on a real GPU: `phantora-prof db build`, `--kernel-times measure`, and the sweeps.

The simulated rank process never touches the real GPU (its CUDA is fake); it sends each
new op signature to a measuring worker, a separate plain-torch process on the real device
(worker.py), which replays the call with fresh random inputs and times it with
torch.profiler (replay.py). Results land in a kernel database (cost/kernel_db.py) that
later CPU-only runs read with `--kernel-db`. source.py is the coordinator's side of that link.

The shipped model data is measured by scripts that run on a bare GPU machine from a checkout
(`python -m phantora_prof.measure.<script>`, no install): measure_kernels.py (the isolated
kernel sweep), sweep_families.py (the in-training family sweep), sdpa_battery.py,
device_facts.py, host_probe.py, capture_real.py (multi-GPU reference runs). They, the worker
and replay.py import torch and the standard library only (tests/test_architecture.py), and
measure_kernels.py and replay.py time calls with one harness, timing.py. What turns their
output into model data is `phantora-prof calibrate` (phantora_prof/calibrate/).
"""
