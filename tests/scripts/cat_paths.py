"""torch.cat's three ways on a CUDA build (phantora_prof/cost/cat_paths.py), one call each:
the batched copy over contiguous inputs, the strided batched copy, and a narrow and a copy per
input (another dtype than the output's, as HF's key/value cache under autocast: fp32 keys make
the cache fp32 and the bf16 values are cast into it; five dims; a single input)."""
import torch

keys = torch.randn(4, 16, 256, 64, device="cuda")
values = torch.randn(4, 16, 256, 64, device="cuda", dtype=torch.bfloat16)
empty = torch.tensor([], dtype=torch.float32, device="cuda")
cases = {
    "dense": torch.cat([keys, keys], dim=-1),
    "strided": torch.cat([keys[..., :32], keys[..., 32:]], dim=-1),
    "cache_keys": torch.cat([empty, keys], dim=-2),
    "cache_values": torch.cat([empty, values], dim=-2),
    "five_dims": torch.cat([keys.unsqueeze(0)] * 2),
    "one_input": torch.cat([values]),
}
torch.cuda.synchronize()
print(" ".join(f"{k}:{str(v.dtype)[6:]}" for k, v in cases.items()))
