"""Large device tensors built from known values, and small answers read off them
(tests/test_runtime_values.py): the Longformer pattern (a [B, 1, S, S] mask materialised from a
[B, S] padding mask, a row sliced back out, global tokens marked through a boolean index, then
`(mask > 0).any().item()` and `nonzero` choose the attention path and its sizes), a large
arange / ones / full and their in-place updates, a large copy of known values. Run with
`--device cpu` it prints what a GPU run prints (the test compares the two)."""
import sys

import torch

dev = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
B, S = 8, 1024
am = torch.ones(B, S, dtype=torch.long, device=dev)
glob = torch.zeros(B, S, dtype=torch.long, device=dev)
glob[:, 0] = 1
glob[3, 17] = 1
merged = am * (glob + 1)
pad = torch.clamp(merged, min=0, max=1).bool()
kv = torch.arange(S, device=dev)
mask4d = pad[:, None, None, :].expand(B, 1, S, S) & (kv[None, None, :, None] >= 0)  # [B, 1, S, S] bool: 8 MiB
float_mask = torch.where(mask4d, torch.tensor(0.0, device=dev), torch.finfo(torch.float32).min)  # 32 MiB
row = float_mask[:, 0, 0, :]
row[merged == 2] = torch.finfo(torch.float32).max
is_global = row > 0
print("global path", is_global.flatten().any().item(), "masked", (row < 0).any().item())
print("global per row", is_global.long().sum(dim=1).tolist(), "max", is_global.long().sum(dim=1).max().item())
print("nonzero", [t.tolist() for t in is_global.nonzero(as_tuple=True)])
big = torch.arange(1 << 22, device=dev, dtype=torch.float32)  # 16 MiB
big.mul_(2).add_(1)
print("arange", big[12345].item(), big.sum().item(), (big > 8000000).sum().item())
ones = torch.ones(2048, 2048, device=dev)
ones[5:7].fill_(3.0)
print("ones", ones.sum().item(), ones[6, 9].item())
rnd = torch.randn(2048, 2048, device=dev)  # random: no values on a simulated GPU, on purpose
rnd.add_(ones)
print("copy", torch.empty_like(ones).copy_(ones)[6].sum().item())
