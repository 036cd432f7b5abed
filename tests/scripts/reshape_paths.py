"""The three paths of `reshape` on the simulated GPU (tests/test_op_tree.py): a contiguous input
(a view), a non-contiguous one that can be viewed (`_reshape_alias` on a CUDA build), one that
cannot (clone + `_unsafe_view`); then the backward of the viewed one (ReshapeAliasBackward0)."""
import torch

x = torch.randn(4, 8, 64, 16, device="cuda", requires_grad=True)
t = x.transpose(1, 2)
x.reshape(4, 8, 1024)
viewed = t[:, :, :4].reshape(4, 64, 4, 16)
t.reshape(4, 64, 128)
viewed.sum().backward()
torch.cuda.synchronize()
