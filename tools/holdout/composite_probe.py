"""Op trees of single ops on the GPU and under the simulator (issue #14, the op stream).

Each case runs once to warm up and once inside a `record_function("case:NAME")` range under
torch.profiler; `--compare REAL SIM` prints, per case, the ops and GPU activities of the real
trace's range next to the simulated one's, and which differ.

    python tools/holdout/composite_probe.py OUT.json                 # on the H200
    phantora-prof --no-trace python tools/holdout/composite_probe.py SIM.json
    python tools/holdout/composite_probe.py --compare REAL.json SIM.json
"""
from __future__ import annotations

import gzip
import json
import sys


def cases():
    import torch
    import torch.nn.functional as F

    dev = "cuda"
    bf = torch.bfloat16

    def grad_of(fn, *shape, dtype=bf):
        x = torch.randn(*shape, device=dev, dtype=dtype, requires_grad=True)

        def run():
            y = fn(x)
            y.backward(torch.ones_like(y))
        return run

    qkv = torch.randn(3, 64, 24, 49, 32, device=dev, dtype=bf, requires_grad=True)

    def select_bwd():
        q, k, v = qkv[0], qkv[1], qkv[2]
        (q * 2 + k + v).backward(torch.ones_like(q))

    w = torch.randn(64, 49, 49, device=dev, dtype=bf)
    y = torch.randn(64, 14, 14, 384, device=dev, dtype=bf)
    tab = torch.randn(169, 12, device=dev, requires_grad=True)
    idx = torch.randint(0, 169, (2401,), device=dev)

    def index_bwd():
        tab[idx].view(49, 49, 12).backward(torch.ones(49, 49, 12, device=dev))

    def strided_fill():
        m = torch.zeros(14, 14, device=dev)
        m[:7, 7:] = 1.0

    out = {
        "select_backward": select_bwd,
        "slice_backward": grad_of(lambda x: x[:, :, :256], 64, 96, 512),
        "masked_fill": lambda: w.masked_fill(w > 0, -100.0),
        "pad_zero": lambda: F.pad(y, (0, 0, 0, 0, 0, 0)),
        "pad_positive": lambda: F.pad(y, (0, 0, 0, 1, 0, 1)),
        "index_put_accumulate": index_bwd,
        "strided_fill": strided_fill,
        "roll_2d": lambda: torch.roll(y, shifts=(-3, -3), dims=(1, 2)),
    }
    f32 = torch.randn(64, 49, 49, device=dev)
    img = torch.randn(16, 64, 56, 56, device=dev, dtype=bf, requires_grad=True)
    ids = torch.randint(0, 50000, (8, 1024), device=dev)
    big = torch.randn(4096, 1024, device=dev, dtype=bf)
    rows = torch.randint(0, 4096, (512,), device=dev)
    out.update({
        "masked_fill_float32": lambda: f32.masked_fill(f32 > 0, float("-inf")),
        "compare_tensors": lambda: w > w.transpose(1, 2),
        "where": lambda: torch.where(w > 0, w, torch.zeros_like(w)),
        "roll_1d": lambda: torch.roll(y, shifts=3, dims=1),
        "roll_flat": lambda: torch.roll(y, shifts=5),
        "index_put_rows": lambda: big.index_put_((rows,), torch.ones(512, 1024, device=dev, dtype=bf)),
        "dropout": grad_of(lambda x: F.dropout(x, 0.1, training=True), 8, 1024, 768),
        "cumsum_ids": lambda: (ids != 0).int().cumsum(-1),
        "interpolate_nearest": grad_of(lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest"), 16, 64, 28, 28),
        "interpolate_bilinear": grad_of(lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear"), 16, 64, 28, 28),
        "avg_pool_global": lambda: F.adaptive_avg_pool2d(img, 1).sum().backward(),
        "stack_three": lambda: torch.stack([y, y, y]),
        "contiguous_transposed": lambda: y.transpose(1, 2).contiguous(),
        "clone_contiguous": lambda: y.clone(),
        "repeat": lambda: y[:8].repeat(1, 2, 1, 1),
        "fill_scalar": lambda: torch.empty(64, 49, 49, device=dev).fill_(2.0),
        "where_float32": lambda: torch.where(f32 > 0, f32, f32 * 2),
        "argmax": lambda: torch.argmax(big, dim=-1),
        "topk": lambda: torch.topk(big.float(), 8, dim=-1),
        "one_hot": lambda: F.one_hot(ids[0], 50000),
        "gather_backward": grad_of(lambda x: torch.gather(x, 1, ids[:, :512].remainder(768).unsqueeze(-1).expand(8, 512, 64)),
                                   8, 768, 64),
        "index_select_backward": grad_of(lambda x: x.index_select(0, rows % 1024), 1024, 256),
        "scatter_add": lambda: torch.zeros(4096, 1024, device=dev, dtype=bf).scatter_add_(
            0, rows.unsqueeze(-1).expand(512, 1024), torch.ones(512, 1024, device=dev, dtype=bf)),
    })
    for n, dt in ((2048, torch.float32), (49, torch.float32), (49, bf), (197, torch.float32), (1024, bf), (2048, bf), (4096, torch.float32)):
        name = f"softmax_backward_{n}_{str(dt).split('.')[-1]}"
        out[name] = grad_of(lambda x: torch.softmax(x, -1), 256, 12, n if n < 1000 else 8, n, dtype=dt)
        out["log_" + name] = grad_of(lambda x: torch.log_softmax(x, -1), 256, 12, n if n < 1000 else 8, n, dtype=dt)
    return out


def run(path: str) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    todo = cases()
    for fn in todo.values():
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for name, fn in todo.items():
            with torch.profiler.record_function(f"case:{name}"):
                fn()
            torch.cuda.synchronize()
    prof.export_chrome_trace(path)


def trees(path: str) -> dict[str, list[str]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    gpu = {e["args"].get("correlation"): e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    host = sorted((e for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime", "user_annotation")),
                  key=lambda e: (e["ts"], -e["dur"]))
    out = {}
    for c in (e for e in host if e["name"].startswith("case:")):
        lines, stack = [], []
        inside = [e for e in host if e is not c and c["ts"] <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"]]
        inside.sort(key=lambda e: (e["tid"] != c["tid"], str(e["tid"]), e["ts"], -e["dur"]))  # the case's thread, then autograd's
        tid = c["tid"]
        for e in inside:
            if e["tid"] != tid:
                tid, stack = e["tid"], []
                lines.append("(another thread)")
            while stack and e["ts"] + e["dur"] > stack[-1]:
                stack.pop()
            if e["cat"] == "cuda_runtime":
                g = gpu.get(e["args"].get("correlation"))
                if g is not None:
                    lines.append("  " * len(stack) + "-> " + g["name"][:110] + f"  [{g.get('dur', 0):.1f} us]")
            else:
                lines.append("  " * len(stack) + e["name"] + " " + str(e["args"].get("Input Dims", ""))[:80])
            stack.append(e["ts"] + e["dur"])
        out[c["name"][5:]] = lines
    return out


def compare(real: str, sim: str) -> None:
    r, s = trees(real), trees(sim)
    for name in r:
        a, b = r[name], s.get(name, [])
        strip = lambda ls: [l.split("  [")[0] for l in ls]  # noqa: E731
        same = strip(a) == strip(b)
        print(f"=== {name}: {'same ops and kernels' if same else 'DIFFERENT'}")
        if not same:
            print("  real:"); print("\n".join("    " + l for l in a))
            print("  sim:"); print("\n".join("    " + l for l in b))
        else:
            for la, lb in zip(a, b):
                if "->" in la:
                    print(f"    {la.strip().split('  [')[0][:70]}  real [{la.split('  [')[-1]} sim [{lb.split('  [')[-1]}")


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[1])
