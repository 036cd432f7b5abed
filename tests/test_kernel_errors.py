"""An op the simulated GPU rejects fails with the CUDA build's words (runtime/dispatch/kernel_errors.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import torch

from conftest import REPO
from phantora_prof.runtime.dispatch.kernel_errors import cuda_build_error, dtype_mismatch

aten = torch.ops.aten


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta")


def test_the_cpu_kernels_words_for_rejected_shapes():
    err = cuda_build_error(aten.mm.default, (_meta(4, 8), _meta(10, 5)), {})
    assert str(err) == "mat1 and mat2 shapes cannot be multiplied (4x8 and 10x5)"
    err = cuda_build_error(aten.add.Tensor, (_meta(4, 8), _meta(4, 9)), {})
    assert "The size of tensor a (8) must match the size of tensor b (9) at non-singleton dimension 1" in str(err)


def test_no_error_where_the_kernel_accepts_writes_or_the_inputs_are_large():
    assert cuda_build_error(aten.mm.default, (_meta(4, 8), _meta(8, 5)), {}) is None  # accepted: not the cause
    assert cuda_build_error(aten.add_.Tensor, (_meta(4, 8), _meta(4, 9)), {}) is None  # writes its input
    assert cuda_build_error(aten.mm.default, (_meta(1 << 13, 1 << 12), _meta(10, 5)), {}) is None  # 32M elements


SCRIPT = """
import sys, torch
try:
    torch.nn.Linear(10, 5).cuda()(torch.randn(4, 8, device="cuda"))
except RuntimeError as e:
    print("linear:", e)
try:
    torch.randn(4, 8, device="cuda") + torch.randn(4, 9, device="cuda")
except RuntimeError as e:
    print("add:", e)
torch.randn(3, 4, device="cuda") @ torch.randn(5, 6, device="cuda")
"""


def test_a_script_sees_and_prints_what_a_gpu_run_shows(tmp_path):
    """The script catches the CUDA build's message, and an uncaught one ends it with python's
    traceback of the user's line (none of the meta kernels' frames)."""
    (tmp_path / "shapes.py").write_text(SCRIPT)
    r = subprocess.run([sys.executable, "-m", "phantora_prof", "--no-trace", "python", "shapes.py"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 1
    assert "linear: mat1 and mat2 shapes cannot be multiplied (4x8 and 10x5)" in r.stdout
    assert "add: The size of tensor a (8) must match the size of tensor b (9) at non-singleton dimension 1" in r.stdout
    tb = r.stderr[r.stderr.index("Traceback"):r.stderr.index("(3x4 and 5x6)")]
    assert tb.splitlines()[-1] == "RuntimeError: mat1 and mat2 shapes cannot be multiplied "
    assert "_meta_registrations" not in tb and "_decomp" not in tb and "shapes.py" in tb


def test_mixed_dtype_matmuls_and_convolutions_fail_as_on_a_gpu():
    """The meta kernels of mm / addmm / convolution take mixed dtypes, the CUDA ones do not:
    `bf16_activations @ fp32_weight` ran in the simulation and crashed on the GPU."""
    bf16 = torch.empty(4, 8, device="meta", dtype=torch.bfloat16)
    err = dtype_mismatch(aten.mm.default, (bf16, _meta(8, 5)), {})
    assert str(err) == "expected mat1 and mat2 to have the same dtype, but got: c10::BFloat16 != float"
    x = torch.empty(1, 3, 8, 8, device="meta", dtype=torch.float16)
    err = dtype_mismatch(aten.convolution.default, (x, _meta(4, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
                         {})
    assert str(err) == "Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor) should be the same"
    bias = torch.empty(4, device="meta", dtype=torch.bfloat16)
    err = dtype_mismatch(aten.convolution.default,
                         (_meta(1, 3, 8, 8), _meta(4, 3, 3, 3), bias, [1, 1], [0, 0], [1, 1], False, [0, 0], 1), {})
    assert str(err) == "Input type (torch.cuda.FloatTensor) and bias type (torch.cuda.BFloat16Tensor) should be the same"
    assert dtype_mismatch(aten.mm.default, (_meta(4, 8), _meta(8, 5)), {}) is None  # one dtype: not looked at
    long = torch.empty(4, 8, device="meta", dtype=torch.long)
    assert str(dtype_mismatch(aten.mm.default, (long, _meta(8, 5)), {})) == \
        "expected mat1 and mat2 to have the same dtype, but got: long int != float"


def test_a_device_the_process_cannot_see_is_cudas_invalid_ordinal(tmp_path):
    (tmp_path / "ordinal.py").write_text("import torch\ntorch.ones(2, device='cuda:3')\n")
    r = subprocess.run([sys.executable, "-m", "phantora_prof", "--no-trace", "python", "ordinal.py"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 1
    assert "Error: CUDA error: invalid device ordinal" in r.stderr  # torch.AcceleratorError from torch 2.8 on
    assert "cuda:3 is not one of the 1 simulated GPU(s) this process sees" in r.stderr


MIXED = """
import torch
m = torch.nn.Linear(8, 4).cuda()
with torch.autocast("cuda", dtype=torch.bfloat16):
    m(torch.randn(2, 8, device="cuda")).sum().backward()  # autocast casts: fine, as on a GPU
print("autocast ok", flush=True)
m(torch.randn(2, 8, device="cuda", dtype=torch.bfloat16))
"""


def test_a_dtype_bug_a_gpu_would_catch_is_caught(tmp_path):
    (tmp_path / "mixed.py").write_text(MIXED)
    r = subprocess.run([sys.executable, "-m", "phantora_prof", "--no-trace", "python", "mixed.py"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 1 and "autocast ok" in r.stdout, r.stderr[-2000:]
    # addmm (with the bias): its structured meta function, shared by the CPU and CUDA kernels, says it
    assert "RuntimeError: mat1 and mat2 must have the same dtype, but got BFloat16 and Float" in r.stderr
