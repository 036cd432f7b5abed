"""Host time of a model's forward with and without autograd's recording, and of its backward (issue #15).

    python tools/holdout/forward_modes.py [--models a,b] [--batch 2] [--out FILE.json]          # on the GPU
    phantora-prof --no-trace python tools/holdout/forward_modes.py [...]                         # simulated

Blind set 22's profiles showed the simulated forward 0.40-0.74x of the real one on every model
while the backward was within -26..+24% (tools/holdout/real_h200/session53/README.md); single ops
in loops were within 0.7-1.3x on session 39's leases. This times, per model, at a batch small
enough that the GPU never holds the host back (bf16 autocast, channels-last vision models, as
zoo.py trains them): the training forward (grad recording on), the same forward under
`torch.no_grad()` (no graph: the ops and the Python alone) and the backward of a recorded forward
(the autograd thread's ops, until `backward()` returns). Host time only: a synchronize before each
timed call, none after (perf_counter around the call). Median of ROUNDS calls after WARM.
Comparing the real and the simulated figures says which part the host model underprices:
autograd's recording (grad against no_grad), the ops and Python (no_grad), or the backward.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

WARM, ROUNDS = 3, 15


def vision(name: str) -> tuple[torch.nn.Module, tuple[int, int]]:
    import zoo

    tv = zoo.import_torchvision()  # before timm, which imports it (a CPU torch beside a CUDA torchvision)
    if name.startswith("timm_"):
        import timm

        arch, size = {"timm_fastvit": ("fastvit_sa12", 256), "timm_hiera": ("hiera_tiny_224", 224),
                      "timm_resnet50": ("resnet50", 224)}[name]
        return timm.create_model(arch, pretrained=False), (size, size)
    arch, size = {"tv_efficientnet_v2": ("efficientnet_v2_s", 300), "tv_resnet50": ("resnet50", 224)}[name]
    return getattr(tv.models, arch)(), (size, size)


def timed(fn, sync: bool = True) -> float:
    """Median host milliseconds of fn() over ROUNDS calls after WARM."""
    out = []
    for i in range(WARM + ROUNDS):
        if sync:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        if i >= WARM:
            out.append((t1 - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def measure(name: str, batch: int) -> dict:
    torch.manual_seed(0)
    model, (h, w) = vision(name)
    model = model.cuda().to(memory_format=torch.channels_last).train()
    x = torch.randn(batch, 3, h, w, device="cuda").contiguous(memory_format=torch.channels_last)
    ac = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731

    def fwd():
        with ac():
            return model(x)

    def fwd_nograd():
        with torch.no_grad(), ac():
            model(x)

    keep = {}

    def fwd_keep():
        keep["y"] = fwd()

    def bwd_only():
        with ac():
            y = model(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y.float().sum().backward()
        keep["bwd"] = (time.perf_counter() - t0) * 1e3

    res = {"model": name, "batch": batch, "params": sum(p.numel() for p in model.parameters())}
    res["forward_ms"] = timed(fwd_keep)
    keep.clear()
    res["forward_nograd_ms"] = timed(fwd_nograd)
    bw = []
    for i in range(WARM + ROUNDS):
        bwd_only()
        model.zero_grad(set_to_none=True)
        if i >= WARM:
            bw.append(keep["bwd"])
    res["backward_ms"] = statistics.median(bw)
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="timm_fastvit,timm_hiera,tv_efficientnet_v2,tv_resnet50")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    rows = []
    for m in a.models.split(","):
        r = measure(m, a.batch)
        print("FORWARD_MODES " + json.dumps(r), flush=True)
        rows.append(r)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
