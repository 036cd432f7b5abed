"""Per-device CUDA random generators of the simulated GPU (`torch.cuda.default_generators`).

A CPU-only torch build has no CUDA generators, so `torch.cuda.default_generators` is empty.
Frameworks that keep several RNG streams (Megatron's `CudaRNGStatesTracker`, DTensor's RNG
tracker) save and restore the state through `default_generators[idx].get_state()/set_state()`
or `torch.cuda.get_rng_state()`, and index the tuple by device. Each simulated device gets a
generator with the layout CUDA's Philox generator reports: 16 bytes, the seed then the offset,
both little-endian int64 (DTensor's tracker reads those two fields directly).

Approximate on purpose: simulated (fake) tensors hold no data, so random kernels draw nothing
and the offset does not advance by itself; it changes only when a program sets it.
"""
from __future__ import annotations

import os
from typing import Any

import torch

# CUDA's default seed (c10/core/GeneratorImpl.h: default_rng_seed_val)
DEFAULT_SEED = 67280421310721
_STATE_BYTES = 16


class SimCudaGenerator:
    """The state of one device's CUDA generator: a seed and a Philox offset."""

    def __init__(self, index: int, seed: int = DEFAULT_SEED, offset: int = 0) -> None:
        self.device = torch.device("cuda", index)
        self._seed = seed
        self._offset = offset

    def manual_seed(self, seed: int) -> "SimCudaGenerator":
        self._seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
        self._offset = 0
        return self

    def seed(self) -> int:
        """A non-deterministic seed, as CUDA's generator draws one."""
        self.manual_seed(int.from_bytes(os.urandom(8), "little") & 0x7FFF_FFFF_FFFF_FFFF)
        return self._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_offset(self) -> int:
        return self._offset

    def set_offset(self, offset: int) -> None:
        self._offset = int(offset)

    def get_state(self) -> torch.Tensor:
        raw = self._seed.to_bytes(8, "little") + self._offset.to_bytes(8, "little", signed=False)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone()

    def set_state(self, new_state: torch.Tensor) -> "SimCudaGenerator":
        if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8 or new_state.numel() != _STATE_BYTES:
            raise RuntimeError(f"RNG state must be a torch.ByteTensor of {_STATE_BYTES} bytes "
                               f"(seed, offset) for a CUDA generator, got {getattr(new_state, 'dtype', type(new_state))} "
                               f"of {getattr(new_state, 'numel', lambda: '?')()} element(s)")
        raw = bytes(new_state.detach().cpu().contiguous().tolist())
        self._seed = int.from_bytes(raw[:8], "little")
        self._offset = int.from_bytes(raw[8:], "little")
        return self

    # CUDA-graph-safe variants: the state object is itself a generator.
    def clone_state(self) -> "SimCudaGenerator":
        return SimCudaGenerator(self.device.index, self._seed, self._offset)

    def graphsafe_get_state(self) -> "SimCudaGenerator":
        return self

    def graphsafe_set_state(self, other: "SimCudaGenerator") -> "SimCudaGenerator":
        self._seed, self._offset = other._seed, other._offset
        return self

    def __repr__(self) -> str:
        return f"SimCudaGenerator(device={self.device}, seed={self._seed}, offset={self._offset})"


def api(generators: tuple[SimCudaGenerator, ...], index: Any) -> dict[str, Any]:
    """The `torch.cuda` RNG functions over `generators`; `index(device)` resolves a device."""

    def get_rng_state(device: Any = "cuda") -> torch.Tensor:
        return generators[index(device)].get_state()

    def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
        generators[index(device)].set_state(new_state)

    def manual_seed_all(seed: int) -> None:
        for g in generators:
            g.manual_seed(seed)

    def seed_all() -> None:
        s = generators[0].seed()
        manual_seed_all(s)

    def set_rng_state_all(new_states: Any) -> None:
        for g, s in zip(generators, new_states):
            g.set_state(s)

    return {
        "manual_seed": lambda seed: generators[index(None)].manual_seed(seed) and None,
        "manual_seed_all": manual_seed_all,
        "seed": lambda: generators[index(None)].seed() and None,
        "seed_all": seed_all,
        "initial_seed": lambda: generators[index(None)].initial_seed(),
        "get_rng_state": get_rng_state,
        "get_rng_state_all": lambda: [g.get_state() for g in generators],
        "set_rng_state": set_rng_state,
        "set_rng_state_all": set_rng_state_all,
    }
