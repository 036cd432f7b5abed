"""torch.save / torch.load of simulated CUDA tensors: a training checkpoint and its round trips.

Usage: checkpoint.py DIR. Writes DIR/ckpt.pt (model, optimizer, a step tensor, a large tensor
and a view of it) and prints what loading it back shows."""
import os
import sys

import torch
import torch.nn as nn

out = sys.argv[1]
torch.manual_seed(0)


def make():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).cuda()


model = make()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(2):
    model(torch.randn(4, 8, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
big = torch.ones(512, 1024, device="cuda")  # 2 MiB of known values (replayed from its recipe)
noise = torch.randn(256, 1024, device="cuda")  # 1 MiB of simulated data: no values
path = os.path.join(out, "ckpt.pt")
torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": torch.tensor(7, device="cuda"),
            "big": big, "big_rows": big[3:5], "noise": noise}, path)
torch.save(model, os.path.join(out, "module.pt"))
print("saved", os.path.getsize(path))

ck = torch.load(path)
print("step", ck["step"].device, ck["step"].item())
print("big", ck["big"].device, tuple(ck["big"].shape), "shares", ck["big_rows"].untyped_storage().nbytes(),
      ck["big_rows"].data_ptr() - ck["big"].data_ptr())
restored = make()
restored.load_state_dict(ck["model"])
print("weights equal", all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(model.parameters(), restored.parameters())))
opt2 = torch.optim.AdamW(restored.parameters(), lr=1e-3)
opt2.load_state_dict(ck["optim"])
print("optim step", float(opt2.state_dict()["state"][0]["step"]), opt2.state[restored[0].weight]["exp_avg"].device)
restored(torch.randn(4, 8, device="cuda")).sum().backward()
opt2.step()
mapped = torch.load(path, map_location="cpu")
print("cpu", mapped["model"]["0.weight"].device, torch.equal(mapped["model"]["0.weight"], model[0].weight.cpu()))
to_dev = torch.load(path, map_location=torch.device("cuda", 0))
print("map device", to_dev["big"].device, to_dev["step"].item())
whole = torch.load(os.path.join(out, "module.pt"), weights_only=False)
print("module", type(whole).__name__, isinstance(whole[0].weight, nn.Parameter), whole[0].weight.device)
torch.save(model[0].weight.detach().cpu(), os.path.join(out, "w0.pt"))  # for the plain-CPU comparison
