"""Runtime fixes that real frameworks (DeepSpeed) need, without the framework (fast):

- small CUDA tensors keep real values (overflow flags, counts, broadcast lengths), also through
  small collectives, whose values really travel between the ranks;
- `.to("cuda")` keeps each Parameter object (optimizers and name maps built before the move);
- CUDA extension builds stop with a clear PhantoraError."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

PY = sys.executable
PROBE = Path(__file__).resolve().parent / "scripts" / "values_probe.py"


def test_small_values_and_parameter_identity_two_ranks(cli):
    r = cli("--nproc-per-node", "2", "--no-trace", PY, str(PROBE), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        assert f"[rank{rank}]: identity True True True" in r.stdout
        assert f"[rank{rank}]: overflow 0" in r.stdout  # simulated data is finite: no overflow
        # all_reduce sums 10 + 20, broadcast sends rank 0's 5, all_gather collects both ranks' pairs
        assert f"[rank{rank}]: sum 30 broadcast 5 gather [0, 0, 1, 7] norm 5.0" in r.stdout
    assert "returned placeholders" not in r.stderr


def test_cuda_extension_build_is_refused_cpu_extension_passes():
    from phantora_prof.runtime.process import extensions

    calls = []
    load = extensions._guard_load(lambda name, sources, *a, **k: calls.append(name) or "module")
    with pytest.raises(extensions.CudaExtensionError, match=r"CUDA extension 'fused_adam' .*multi_tensor_adam\.cu"):
        load("fused_adam", ["fused_adam_frontend.cpp", "multi_tensor_adam.cu"])
    with pytest.raises(extensions.CudaExtensionError):
        load("x", ["x.cpp"], with_cuda=True)
    assert load("cpu_adam", ["cpu_adam.cpp"]) == "module" and calls == ["cpu_adam"]
    inline = extensions._guard_load_inline(lambda name, cpp, cuda=None, *a, **k: "ok")
    with pytest.raises(extensions.CudaExtensionError):
        inline("k", "int f();", cuda_sources="__global__ void k(){}")
    assert inline("k", "int f();") == "ok"


def test_grad_scaler_scale_grows_and_backs_off_as_on_a_gpu(cli):
    """growth_interval=2: with finite gradients the scale doubles every second step; an inf
    in a (small, valued) gradient makes that step back off by half and restart the count."""
    r = cli("--no-trace", PY, str(Path(__file__).resolve().parent / "scripts" / "grad_scaler.py"), "7", "4")
    assert r.returncode == 0, r.stderr[-3000:]
    got = [(float(s), int(t)) for s, t in __import__("re").findall(r"scale ([0-9.e+]+) tracker (\d+)", r.stdout)]
    # torch's _amp_update_scale_ on a GPU: finite -> tracker += 1, doubling (and reset) at 2;
    # non-finite -> scale * 0.5, tracker 0
    assert got == [(1024.0, 1), (2048.0, 0), (2048.0, 1), (4096.0, 0), (2048.0, 0), (2048.0, 1), (4096.0, 0)]
