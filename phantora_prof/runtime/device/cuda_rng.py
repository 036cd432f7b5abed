"""Per-device CUDA random generators of the simulated GPU (`torch.cuda.default_generators`).

A CPU-only torch build has no CUDA generators, so `torch.cuda.default_generators` is empty.
Frameworks that keep several RNG streams (Megatron's `CudaRNGStatesTracker`, DTensor's RNG
tracker) save and restore the state through `default_generators[idx].get_state()/set_state()`
or `torch.cuda.get_rng_state()`, and index the tuple by device. Each simulated device gets a
generator with the layout CUDA's Philox generator reports: 16 bytes, the seed then the offset,
both little-endian int64 (DTensor's tracker reads those two fields directly).

Each generator is a real `torch.Generator` (a subclass of it), so the dispatcher accepts it
wherever an op takes `generator=`: `torch.randint(..., device="cuda", generator=g)`,
`torch.randperm`, `multinomial`, `nn.init`'s functions. Underneath it is a CPU generator, seeded
with the CUDA one's seed: random ops whose small outputs get real values (values.py) draw from
it, deterministically per seed. `torch.Generator(device="cuda")` makes one
(`install_generator_factory`; a CPU build cannot make CUDA generators at all).

Approximate on purpose: simulated (fake) tensors hold no data, so random kernels over them draw
nothing and leave the offset where it is; random values drawn for small tensors move it on
(by a multiple of 4 covering them, as Philox does), and a state set back to an offset values
were drawn to replays them. Values drawn on the CPU differ from what a GPU's Philox generator
would draw.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Callable

import torch

# CUDA's default seed (c10/core/GeneratorImpl.h: default_rng_seed_val)
DEFAULT_SEED = 67280421310721
_STATE_BYTES = 16
_POSITIONS_KEPT = 1024  # (seed, offset) positions remembered per generator (~5 KB each)


_CGenerator = torch._C.Generator
_SEED_MASK = 0xFFFF_FFFF_FFFF_FFFF


class SimCudaGenerator(_CGenerator):
    """The state of one device's CUDA generator: a seed and a Philox offset.

    A `torch.Generator` (CPU underneath) whose `device` is the simulated GPU and whose state
    has CUDA's layout."""

    def __new__(cls, index: int = 0, seed: int = DEFAULT_SEED, offset: int = 0) -> "SimCudaGenerator":
        return super().__new__(cls)  # a CPU generator: the C constructor cannot make a CUDA one here

    def __init__(self, index: int = 0, seed: int = DEFAULT_SEED, offset: int = 0) -> None:
        self._device = torch.device("cuda", index)
        self._seed = 0
        self._seed_cpu(seed)
        self._offset = offset
        # the CPU generator's position at each (seed, offset) values were drawn to, so that a
        # saved state set back replays the same values (activation checkpointing's recompute,
        # torch.random.fork_rng); bounded, oldest first out
        self._positions: OrderedDict[tuple[int, int], torch.Tensor] = OrderedDict()

    def note_draw(self, count: int) -> None:
        """`count` values were drawn from the CPU generator underneath (a random op over a small
        tensor, values.py): the offset moves on as Philox's does (a multiple of 4 covering them),
        and the new position is remembered for `set_state`."""
        self._offset += 4 * ((max(int(count), 1) + 3) // 4)
        self._positions[(self._seed, self._offset)] = _CGenerator.get_state(self)
        if len(self._positions) > _POSITIONS_KEPT:
            self._positions.popitem(last=False)

    def _go_to(self, offset: int) -> None:
        """Set the offset; the CPU generator follows to where it was at that offset: the seed's
        start for offset 0, a position remembered by note_draw, else it is left where it is (an
        offset no value was drawn to: DTensor's tracker sets such offsets per shard)."""
        self._offset = int(offset)
        if self._offset == 0:
            _CGenerator.manual_seed(self, self._seed)
            return
        saved = self._positions.get((self._seed, self._offset))
        if saved is not None:
            _CGenerator.set_state(self, saved)

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self._device

    def _seed_cpu(self, seed: int) -> None:
        self._seed = int(seed) & _SEED_MASK
        _CGenerator.manual_seed(self, self._seed)

    def manual_seed(self, seed: int) -> "SimCudaGenerator":  # type: ignore[override]
        self._seed_cpu(seed)
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
        self._go_to(offset)

    def get_state(self) -> torch.Tensor:  # type: ignore[override]
        raw = self._seed.to_bytes(8, "little") + self._offset.to_bytes(8, "little", signed=False)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone()

    def set_state(self, new_state: torch.Tensor) -> "SimCudaGenerator":  # type: ignore[override]
        if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8 or new_state.numel() != _STATE_BYTES:
            raise RuntimeError(f"RNG state must be a torch.ByteTensor of {_STATE_BYTES} bytes "
                               f"(seed, offset) for a CUDA generator, got {getattr(new_state, 'dtype', type(new_state))} "
                               f"of {getattr(new_state, 'numel', lambda: '?')()} element(s)")
        raw = bytes(new_state.detach().cpu().contiguous().tolist())
        self._seed_cpu(int.from_bytes(raw[:8], "little"))
        self._go_to(int.from_bytes(raw[8:], "little"))
        return self

    # CUDA-graph-safe variants: the state object is itself a generator.
    def clone_state(self) -> "SimCudaGenerator":
        return self._copy()

    def _copy(self) -> "SimCudaGenerator":
        other = SimCudaGenerator(self.device.index, self._seed, self._offset)
        other._positions.update(self._positions)
        _CGenerator.set_state(other, _CGenerator.get_state(self))
        return other

    def graphsafe_get_state(self) -> "SimCudaGenerator":
        return self

    def graphsafe_set_state(self, other: "SimCudaGenerator") -> "SimCudaGenerator":
        self._seed_cpu(other._seed)
        self._positions.update(other._positions)
        self._go_to(other._offset)
        return self

    def __reduce__(self) -> tuple:
        return (SimCudaGenerator, (self.device.index, self._seed, self._offset))

    def __deepcopy__(self, memo: dict) -> "SimCudaGenerator":
        return self._copy()

    def __repr__(self) -> str:
        return f"SimCudaGenerator(device={self.device}, seed={self._seed}, offset={self._offset})"


def install_generator_factory(current_device: Callable[[], int], device_count: int) -> None:
    """`torch.Generator(device="cuda[:i]")` returns a SimCudaGenerator; other devices get torch's.

    `torch.Generator` becomes a subclass of torch's class whose metaclass answers
    `isinstance` / `issubclass` for every generator (CPU ones included) and makes the CUDA ones
    itself, since torch's C constructor refuses a CUDA device on a CPU build (and would need a
    real GPU on a CUDA one). torch's own class stays `torch._C.Generator`."""
    if isinstance(torch.Generator, _GeneratorMeta):
        return

    def make(device: Any = None) -> _CGenerator:
        if device is None:
            return _CGenerator()
        d = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        if d.type != "cuda":
            return _CGenerator(device=d)
        index = current_device() if d.index is None else d.index
        if not 0 <= index < device_count:
            raise RuntimeError(f"torch.Generator(device={str(device)!r}): the simulated machine has "
                               f"{device_count} GPU(s) per rank (cuda:0..cuda:{device_count - 1})")
        return SimCudaGenerator(index)

    _GeneratorMeta.make = staticmethod(make)
    torch.Generator = Generator  # type: ignore[misc]


class _GeneratorMeta(type(_CGenerator)):  # type: ignore[misc]
    make: Callable[..., _CGenerator]

    def __call__(cls, device: Any = None) -> _CGenerator:  # type: ignore[override]
        return cls.make(device)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _CGenerator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _CGenerator)


class Generator(_CGenerator, metaclass=_GeneratorMeta):
    """What `torch.Generator` names under the simulator (see install_generator_factory)."""

    __module__ = "torch"


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
