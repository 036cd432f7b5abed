import torch
x = torch.empty(1024, 1024, 1024, 16, device="cuda")  # 64 GiB
y = torch.empty(1024, 1024, 1024, 16, device="cuda")  # another 64 GiB: more than an 80 GB A100
