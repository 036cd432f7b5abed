"""Runtime fixes that Megatron-core needed, tested without it: per-device CUDA generators
(`torch.cuda.default_generators`, RNG state save/restore) and `torch.tensor([...])` over
1-element CUDA tensors (C++ reads them with the Python dispatch key off)."""
from __future__ import annotations

import sys
import textwrap

import torch

from phantora_prof.runtime.device.cuda_rng import DEFAULT_SEED, SimCudaGenerator, api

PY = sys.executable


def test_generator_state_layout_and_round_trip():
    g = SimCudaGenerator(0)
    assert g.initial_seed() == DEFAULT_SEED and g.device == torch.device("cuda", 0)
    g.manual_seed(1234)
    g.set_offset(40)
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    # CUDA's Philox layout: int64 seed then int64 offset (DTensor's RNG tracker reads them)
    assert state[:8].view(torch.int64).item() == 1234 and state[8:].view(torch.int64).item() == 40
    other = SimCudaGenerator(1).set_state(state)
    assert (other.initial_seed(), other.get_offset()) == (1234, 40)
    assert g.graphsafe_get_state() is g
    clone = g.clone_state()
    g.manual_seed(7)
    assert clone.initial_seed() == 1234 and SimCudaGenerator(0).graphsafe_set_state(clone).initial_seed() == 1234


def test_rng_api_per_device():
    gens = (SimCudaGenerator(0), SimCudaGenerator(1))
    current = {"d": 1}
    f = api(gens, lambda d: current["d"] if d in (None, "cuda") else int(d))
    f["manual_seed"](5)
    assert gens[1].initial_seed() == 5 and gens[0].initial_seed() == DEFAULT_SEED
    f["manual_seed_all"](9)
    assert [g.initial_seed() for g in gens] == [9, 9]
    saved = f["get_rng_state"]()
    f["manual_seed"](11)
    f["set_rng_state"](saved)
    assert f["initial_seed"]() == 9
    assert len(f["get_rng_state_all"]()) == 2


SCRIPT = """
import torch
gens = torch.cuda.default_generators
assert len(gens) == torch.cuda.device_count() >= 1, gens
torch.cuda.manual_seed(42)
state = torch.cuda.get_rng_state()
gens[torch.cuda.current_device()].manual_seed(7)
torch.cuda.set_rng_state(state)
print("seed", torch.cuda.initial_seed())
ws = [torch.randn(64, 64, device="cuda") for _ in range(3)]
norms = torch.tensor([torch.norm(w) for w in ws])  # C++ reads each element with .item()
print("norms", tuple(norms.shape), norms.dtype, norms.device)
"""


def test_default_generators_and_tensor_of_cuda_scalars_under_runtime(cli):
    (cli.cwd / "rng.py").write_text(textwrap.dedent(SCRIPT))
    r = cli("--no-trace", PY, "rng.py", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "seed 42" in r.stdout
    assert "norms (3,) torch.float32 cpu" in r.stdout
