"""Optimizers and clip_grad_norm_ with their default implementation (foreach=None): on CUDA
they take the multi-tensor (foreach) path; the simulation must take it too."""
import torch
from torch.optim.optimizer import _default_to_fused_or_foreach
from torch.utils._foreach_utils import _has_foreach_support

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
params = list(model.parameters())
print("defaults", _default_to_fused_or_foreach(params, differentiable=False, use_fused=False))
print("clip foreach", _has_foreach_support(params, torch.device("cuda")))
opts = [torch.optim.AdamW(params, lr=1e-3), torch.optim.SGD(params, lr=0.1, momentum=0.9),
        # fused, with the learning rate as a CPU tensor (aten::_fused_adamw_.tensor_lr): CUDA's
        # kernel reads it on the host
        torch.optim.AdamW(params, lr=torch.tensor(1e-3), fused=True)]
x = torch.randn(32, 64, device="cuda")
for opt in opts:
    model(x).sum().backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    opt.zero_grad()
torch.cuda.synchronize()
print("done")
