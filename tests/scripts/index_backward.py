"""Advanced indexing forward and backward on the simulated GPU (a relative-position-bias table
gathered by an index, as Swin's attention does): the backward runs in place as a CUDA build runs
it (`_index_put_impl_`, accumulate and unsafe), twice into one gradient."""
import torch

torch.manual_seed(0)
table = torch.randn(225, 24, device="cuda", requires_grad=True)
idx = torch.randint(0, 225, (4096,), device="cuda")
(table[idx] * 2).sum().backward()
table[idx].sum().backward()  # the second gather's gradient accumulates into the first
assert table.grad.shape == (225, 24) and table.grad.device.type == "cuda"
print("grad ok", tuple(table.grad.shape))
