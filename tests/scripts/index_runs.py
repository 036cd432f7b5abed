"""The backward of a relative-position bias gather (`table[index]`, as torchvision's Swin builds
its 7 x 7 window's index on the CPU and moves it with the module): the simulation knows the index
values, so the accumulation kernel is timed by the longest run of one row's indices (the zero
offset, 49 of 2,401); then the same table gathered by indices drawn on the GPU (values unknown)."""
import torch

ws = 7
coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
rel[:, :, 0] += ws - 1
rel[:, :, 1] += ws - 1
rel[:, :, 0] *= 2 * ws - 1
index = rel.sum(-1).flatten().cuda()
table = torch.zeros((2 * ws - 1) ** 2, 12, device="cuda", requires_grad=True)
table[index].sum().backward()
drawn = torch.randint(0, (2 * ws - 1) ** 2, (ws ** 4,), device="cuda")
table[drawn].sum().backward()
torch.cuda.synchronize()
print("runs ok", int(torch.bincount(index.cpu()).max()))
