"""A model built on the CPU, initialised, read and moved (runtime/dispatch/deferred_init.py).

`python host_init.py values` prints digests of CPU tensors initialised the ways models do
(factories, in-place random init, trunc_normal_, a padding row zeroed through a view, deep
copies, pickling, numpy), and a random draw after them: run plainly and under the simulator,
the lines must be equal. `python host_init.py memory` (simulator only) builds a 64M-parameter
model on the CPU, moves it to the GPU and prints how much the process's peak resident memory grew.
"""
import copy
import hashlib
import io
import pickle
import sys

import torch
import torch.nn as nn


def digest(t: torch.Tensor) -> str:
    return hashlib.sha1(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def values() -> None:
    torch.manual_seed(1)
    emb = nn.Embedding(8192, 256, padding_idx=0)  # normal_, then weight[0].fill_(0) on a view
    lin = nn.Linear(1024, 1024)  # kaiming_uniform_ through uniform_
    tn = torch.empty(1024, 512)
    nn.init.trunc_normal_(tn, std=0.02)  # uniform_, erfinv_, mul_, add_, clamp_
    r = torch.randn(1024, 1024)
    z = torch.zeros(1024, 1024).add_(3)
    f = torch.full((512, 1024), 0.5)
    g = torch.Generator().manual_seed(7)
    gw = torch.empty(1024, 512).normal_(generator=g)
    after = torch.rand(4)  # the global stream after every init above
    print("after", after.tolist())
    print("emb", digest(emb.weight), emb.weight[0].abs().sum().item())
    print("lin", digest(lin.weight), digest(lin.bias))
    print("tn", digest(tn))
    print("randn", digest(r), "zeros+3", digest(z), "full", digest(f), "gen", digest(gw))
    twin = copy.deepcopy(nn.Linear(1024, 1024))
    print("deepcopy", digest(twin.weight))
    blob = pickle.dumps(torch.randn(512, 1024))
    print("pickle", digest(pickle.loads(blob)))
    buf = io.BytesIO()
    torch.save({"w": torch.randn(512, 1024)}, buf)
    buf.seek(0)
    print("save", digest(torch.load(buf)["w"]))
    s = torch.randn(600, 1024)
    print("sum", f"{s.sum().item():.6f}", "numpy", float(torch.randn(600, 1024).numpy()[3, 5]))
    print("end", torch.rand(3).tolist())


def memory() -> None:
    torch.manual_seed(0)
    before = peak_rss_mb()
    model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(16)])  # 67M parameters, 268 MB
    model = model.to("cuda")
    print(f"peak_rss_growth_mb {peak_rss_mb() - before:.0f}")
    print("params on", next(model.parameters()).device)


if __name__ == "__main__":
    {"values": values, "memory": memory}[sys.argv[1]]()
