"""The simulator's GPU key for a device name as torch (and kineto's deviceProperties) report it.

Standard library only: the device-side scripts (measure_kernels.py) import it on a bare GPU
machine, and the calibration reads traces' GPUs with it (tests/test_architecture.py).
"""
from __future__ import annotations

# GPU names as torch reports them -> the simulator's GPU keys
GPU_KEYS = (("H200", "h200"), ("H100", "h100"), ("A100", "a100"))


def gpu_key_for(device_name: str) -> str | None:
    """"NVIDIA H100 80GB HBM3" -> "h100"; None for a GPU the simulator has no key for."""
    for marker, key in GPU_KEYS:
        if marker in device_name:
            return key
    return None
