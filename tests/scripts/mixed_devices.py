import torch
a = torch.randn(4, 4, device="cuda:0")
b = torch.randn(4, 4, device="cuda:1")
a @ b
