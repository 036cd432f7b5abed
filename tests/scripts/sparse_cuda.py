"""A sparse COO tensor on the simulated GPU: refused with a clear error (tests/test_runtime_values.py)."""
import torch

i = torch.tensor([[0, 1], [1, 0]], device="cuda")
s = torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0], device="cuda"), (2, 2))
print("unreachable", s)
