"""torch.compile under the simulator (issue #16): a small transformer-style MLP block trained
with bf16 autocast and fused AdamW, compiled or eager; plus the cases real scripts hit
(graph breaks, small constant tensors, other backends)."""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

mode = sys.argv[1]


class Block(nn.Module):
    def __init__(self, d: int = 512):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.out(F.gelu(self.fc(self.ln(x)), approximate="tanh"))


def timed_step(model, opt, x) -> float:
    """One synchronized bf16-autocast training step; its milliseconds by the host's clock."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def train(model, steps: int = 4, per_step_peaks: bool = False) -> None:
    """`per_step_peaks`: also each step's own peak (the statistics reset after every step), to
    tell the compiling step's transient from the steady peak (tools/holdout/device_session55b.sh)."""
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(16, 256, 512, device="cuda")
    overall = 0
    for i in range(steps):
        print(f"step {i} ms {timed_step(model, opt, x):.3f}")
        if per_step_peaks:
            peak = torch.cuda.max_memory_allocated()
            overall = max(overall, peak)
            print(f"peak step {i} {peak}")
            torch.cuda.reset_peak_memory_stats()
    print("peak", max(overall, torch.cuda.max_memory_allocated()))


torch.manual_seed(0)
if mode in ("compiled", "eager", "compiled_peaks", "eager_peaks"):
    model = nn.Sequential(Block(), Block()).cuda()
    train(torch.compile(model) if mode.startswith("compiled") else model, per_step_peaks=mode.endswith("_peaks"))
elif mode == "reduce_overhead":
    # CUDA graph trees (runtime/compile/cudagraphs.py): step 0 warms up, step 1 records, then replays
    from torch._dynamo.utils import counters

    model = nn.Sequential(Block(), Block()).cuda()
    train(torch.compile(model, mode="reduce-overhead"), steps=5)
    print("cudagraph_skips", counters["inductor"]["cudagraph_skips"])
elif mode == "reduce_overhead_mutation":
    # a graph that mutates an input which is neither a parameter nor a buffer: Inductor skips
    # CUDA graphs for it (and counts the skip)
    from torch._dynamo.utils import counters

    @torch.compile(mode="reduce-overhead")
    def accumulate(x, total):
        total.add_(x.sum())
        return x * 2

    total = torch.zeros((), device="cuda")
    for _ in range(4):
        accumulate(torch.randn(1024, device="cuda"), total)
    torch.cuda.synchronize()
    print("cudagraph_skips", counters["inductor"]["cudagraph_skips"])
elif mode == "eager_then_compiled":
    # Dynamo loads when the program first needs it (runtime/process/lazy_dynamo.py): an eager
    # step does not load it; torch.compile does, and what the eager step's optimizer cached
    # (Optimizer.state_dict's torch._disable_dynamo) becomes Dynamo's real disable wrapper
    model = Block().cuda()
    train(model, steps=1)
    torch.optim.SGD(model.parameters()).state_dict()
    print("dynamo loaded after an eager step:", "torch._dynamo.convert_frame" in sys.modules)
    state_dict = torch.optim.Optimizer.state_dict.__wrapped__
    print("state_dict disabled before:", getattr(getattr(state_dict, "__dynamo_disable", None), "_torchdynamo_disable", False))
    train(torch.compile(model), steps=2)
    print("dynamo loaded after compile:", "torch._dynamo.convert_frame" in sys.modules)
    print("state_dict disabled after:", getattr(getattr(state_dict, "__dynamo_disable", None), "_torchdynamo_disable", False))
elif mode == "dynamo_submodule_first":
    # a Dynamo submodule imported before anything else of Dynamo is the module Dynamo itself uses
    import gc

    from torch._dynamo.utils import counters

    f = torch.compile(lambda x: torch.sin(x) * 2)
    f(torch.randn(64, device="cuda"))
    copies = [m for m in gc.get_objects() if type(m).__name__ == "module" and m.__name__ == "torch._dynamo.utils"]
    print("utils modules", len(copies), "graphs counted", counters["stats"]["unique_graphs"])
elif mode == "cpu_attribute":
    # a plain tensor attribute stays on the CPU and is moved inside the compiled forward
    class Scaled(Block):
        def __init__(self):
            super().__init__()
            self.scale = torch.full((512,), 0.5)  # not a buffer: .cuda() leaves it on the CPU

        def forward(self, x):
            return super().forward(x) * self.scale.to(x.device)

    model = torch.compile(Scaled().cuda())
    train(model, steps=2)
    # back to the CPU with Dynamo's guards holding weak references to the parameters (Lightning
    # does this at teardown): on a GPU the parameters keep their objects
    params = list(model.parameters())
    model.cpu()
    print("moved to", {p.device.type for p in model.parameters()}, "same objects",
          all(a is b for a, b in zip(params, model.parameters())))
elif mode == "backend_eager":
    train(torch.compile(nn.Sequential(Block()).cuda(), backend="eager"))
elif mode == "graph_break":
    class Broken(Block):
        def forward(self, x):
            y = self.ln(x)
            torch._dynamo.graph_break()
            return x + self.out(F.gelu(self.fc(y)))

    train(torch.compile(Broken().cuda()), steps=2)
elif mode == "constant":
    @torch.compile
    def scale(x):
        return x * torch.tensor([2.0], dtype=x.dtype, device=x.device) + torch.tensor([], device=x.device).sum()

    y = scale(torch.randn(1024, device="cuda"))
    torch.cuda.synchronize()
    print("shape", tuple(y.shape))
elif mode == "embedding":
    # a fused kernel that gathers 128 rows of a 50257 x 768 table (GPT-2's token embedding) and
    # normalizes them, and its backward, which scatters into the table's gradient
    table = torch.randn(50257, 768, device="cuda", requires_grad=True)
    idx = torch.randint(0, 50257, (128,), device="cuda")

    @torch.compile
    def embed(idx, table):
        return F.layer_norm(F.embedding(idx, table), (768,))

    for _ in range(2):
        embed(idx, table).sum().backward()
    torch.cuda.synchronize()
elif mode == "vocab":
    # a language model head over GPT-2's 50257-wide vocabulary: Inductor pads its GEMMs to 50264
    # when that is faster (decided by the cost model under simulation)
    head = nn.Linear(768, 50257, bias=False, device="cuda", dtype=torch.bfloat16)
    h = torch.randn(8192, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    @torch.compile
    def loss(h):
        return F.cross_entropy(head(h).float(), torch.zeros(8192, dtype=torch.long, device="cuda"))

    for _ in range(2):
        loss(h).backward()
    torch.cuda.synchronize()
    print("peak", torch.cuda.max_memory_allocated())
elif mode == "flex":
    # flex_attention inside a compiled function: Inductor's Triton template, forward and backward
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B, H, S, D = 2, 4, 512, 64
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, B=None, H=None, Q_LEN=S, KV_LEN=S, device="cuda")

    @torch.compile
    def attend(q, k, v):
        return (flex_attention(q, k, v, block_mask=mask) * 2).sum()

    for i in range(4):
        attend(q, k, v).backward()
        print(f"flex step {i} allocated {torch.cuda.memory_allocated()}")
elif mode == "dynamic":
    # sequences of different lengths: Dynamo compiles the first length statically, recompiles
    # with a symbolic length on the second (automatic dynamic shapes), then reuses that graph
    from torch._dynamo.utils import counters

    model = torch.compile(nn.Sequential(Block(), Block()).cuda())
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    for i, seq in enumerate((256, 128, 384, 512, 384)):
        x = torch.randn(8, seq, 512, device="cuda")
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        ms = timed_step(model, opt, x)
        print(f"seq {seq} ms {ms:.3f} peak {torch.cuda.max_memory_allocated()}")
    print("graphs", counters["stats"]["unique_graphs"])
elif mode == "dynamic_graphed":
    # dynamic=True from the start, under CUDA graph trees: one graph recorded per length
    from torch._dynamo.utils import counters

    model = torch.compile(nn.Sequential(Block(), Block()).cuda(), dynamic=True, mode="reduce-overhead")
    with torch.no_grad():
        for seq in (256, 128, 256, 128, 256, 128, 384):
            y = model(torch.randn(8, seq, 512, device="cuda"))
            torch.cuda.synchronize()
            print("seq", seq, tuple(y.shape), torch.cuda.memory_allocated())
    print("graphs", counters["stats"]["unique_graphs"])
elif mode == "compiled_optimizer":
    # the optimizer step compiled on its own (PyTorch's "compiling the optimizer" recipe):
    # Inductor fuses the per-parameter updates into foreach (combo) Triton kernels
    model = nn.Sequential(Block(), Block()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-3), capturable=True)

    @torch.compile(fullgraph=False)
    def opt_step():
        opt.step()

    x = torch.randn(16, 256, 512, device="cuda")
    for i in range(4):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(x).pow(2).mean().backward()
        opt_step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        print(f"step {i} ms {(time.perf_counter() - t0) * 1e3:.3f}")
    print("peak", torch.cuda.max_memory_allocated())
elif mode == "ddp":
    # torch.compile of a DistributedDataParallel module (run under torchrun): DDPOptimizer splits
    # the graph at the gradient buckets and compiles each piece; DDP's own Python (its
    # _pre_forward, the buffers' broadcast) runs between them
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("nccl")
    torch.cuda.set_device(dist.get_rank())
    model = torch.compile(DDP(nn.Sequential(*[Block() for _ in range(4)]).cuda(), bucket_cap_mb=4))
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(8, 256, 512, device="cuda")
    for i in range(3):
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print("ddp rank", dist.get_rank(), "done")
    dist.destroy_process_group()
