"""A sparse tensor on the simulated GPU: refused with a clear error (tests/test_runtime_values.py).
`to_sparse` of a CUDA tensor (argv[1] == "to_sparse") failed inside FakeTensor with a message about
`empty_strided` on the CUDA backend; a sparse COO tensor built on the GPU (the default) inside the
simulator's memory tracking."""
import sys

import torch

if sys.argv[1:] == ["to_sparse"]:
    s = torch.randn(8, 8, device="cuda").relu().to_sparse()
else:
    i = torch.tensor([[0, 1], [1, 0]], device="cuda")
    s = torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0], device="cuda"), (2, 2))
print("unreachable", s)
