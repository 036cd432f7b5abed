"""`data_ptr()` of simulated CUDA tensors: the simulated allocator's device address.

A fake tensor has no memory, and torch answers `data_ptr()` with 0 (and a deprecation
warning) for all of them. Frameworks compare data pointers to find aliasing and to check
that buffers stayed in place (torchtitan's CUDA-graph wrapper records its static inputs'
addresses; checkpointers deduplicate shared storages by pointer): with every pointer 0, all
tensors alias. Each CUDA storage gets the address of the block the allocator model gave it
(runtime/device/memory.py), plus the tensor's storage offset; storages without a block (e.g. of
size 0) get a distinct address of their own. `untyped_storage().data_ptr()` (safetensors' and
HF transformers' shared-tensor checks) answers the storage's block address the same way,
without torch's FakeTensor warning; a storage the allocator model never saw answers as before.
"""
from __future__ import annotations

import itertools

import torch
from torch._subclasses.fake_tensor import FakeTensor

_fallback = itertools.count(0x10_0000_0000, 512)


def _storage_address(storage) -> int:
    block = getattr(storage, "_phantora_block", None)
    if block is not None:
        return int(block.addr)
    addr = getattr(storage, "_phantora_addr", None)
    if addr is None:
        addr = next(_fallback)
        storage._phantora_addr = addr
    return addr


def install() -> None:
    original = FakeTensor.data_ptr if "data_ptr" in FakeTensor.__dict__ else torch.Tensor.data_ptr

    def data_ptr(self: torch.Tensor) -> int:
        if self.device.type != "cuda":
            return original(self)
        return _storage_address(self.untyped_storage()) + self.storage_offset() * self.element_size()

    FakeTensor.data_ptr = data_ptr  # type: ignore[method-assign]

    original_storage_ptr = torch.UntypedStorage.data_ptr

    def storage_data_ptr(self) -> int:
        block = getattr(self, "_phantora_block", None)
        if block is None:
            return original_storage_ptr(self)
        return int(block.addr)

    torch.UntypedStorage.data_ptr = storage_data_ptr  # type: ignore[method-assign]
