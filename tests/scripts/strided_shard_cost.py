"""DTensor's strided-shard arithmetic, called repeatedly: prints each call's result and its
simulated host time (tests/test_sharding_memo.py runs it with and without a trace)."""
import time

import torch  # noqa: F401 - the runtime's fake CUDA device
from torch.distributed.tensor.placement_types import _StridedShard

print("memo", getattr(_StridedShard.local_shard_size_and_offset, "_phantora_memo", False))
placement = _StridedShard(0, split_factor=4)
for size in (4096, 4096, 1000, 4096, 1000):
    for rank in (0, 3):
        start = time.perf_counter_ns()
        out = placement._local_shard_size_and_offset(size, 16, rank)
        print(size, rank, out, time.perf_counter_ns() - start)
