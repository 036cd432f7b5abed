"""Ops a CUDA build runs as their composite C++ body (runtime/dispatch/cuda_dispatch.py,
COMPOSITE_BODIES), profiled one step: test_op_tree reads what each launched."""
import sys

import torch
import torch.nn.functional as F
from one_step_profile import profile_one_step

dev = "cuda"
qkv = torch.randn(3, 8, 4, 49, 32, device=dev, dtype=torch.bfloat16, requires_grad=True)
wide = torch.randn(8, 96, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
scores = torch.randn(4, 49, 49, device=dev, dtype=torch.bfloat16)
table = torch.randn(169, 6, device=dev, requires_grad=True)
index = torch.randint(0, 169, (2401,), device=dev)


def step():
    q, k, v = qkv[0], qkv[1], qkv[2]  # select backward: zeros, then a memcpy into a contiguous slab
    (q * 2 + k + v).float().sum().backward()
    wide[:, :, :32].float().sum().backward()  # slice backward: zeros, then a strided copy
    scores.masked_fill(scores > 0, -100.0)  # a clone (memcpy), then masked_fill_
    F.pad(wide.detach(), (0, 0, 0, 0))  # no positive pad: a clone
    F.pad(wide.detach(), (0, 4))  # padding: a fill, then a strided copy
    mask = torch.zeros(14, 14, device=dev)
    mask[:7, 7:] = 1.0  # a fill of a strided view
    table[index].sum().backward()  # index backward: _index_put_impl_ in place (no index_put)
    table.detach().index_put((index,), torch.ones(2401, 6, device=dev), accumulate=True)  # a clone, then index_put_
    torch.cuda.synchronize()


profile_one_step(step, sys.argv[1])
