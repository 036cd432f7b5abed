"""Convolutions keep channels-last on a simulated CUDA device, as cuDNN does."""
import torch
m = torch.nn.Conv2d(3, 8, 3).cuda().to(memory_format=torch.channels_last)
x = torch.randn(2, 3, 16, 16, device="cuda").to(memory_format=torch.channels_last)
with torch.autocast("cuda", dtype=torch.bfloat16):
    y = m(x)
print("x cl", x.is_contiguous(memory_format=torch.channels_last), x.stride())
print("y", y.stride(), y.is_contiguous(memory_format=torch.channels_last), y.dtype)
bn = torch.nn.BatchNorm2d(8).cuda()
z = bn(y)
print("z", z.stride())
z.float().sum().backward()
print("grad w", m.weight.grad.is_contiguous(memory_format=torch.channels_last))
