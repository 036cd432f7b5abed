"""Ordinary-script idioms under the simulator (session 55): each in a try block, printing ok or what
failed, so a breakage a user would meet first shows as one line. Plain PyTorch.

    phantora-prof --no-trace python tools/holdout/script_idioms.py      # simulated
    python tools/holdout/script_idioms.py                               # on a GPU
"""
import os, sys, time, math, json, signal, tempfile, contextlib
import torch, torch.nn as nn, torch.nn.functional as F
results = {}
def check(name):
    def deco(fn):
        try:
            r = fn(); results[name] = "ok" + (f" {r}" if r is not None else "")
        except Exception as e:
            results[name] = f"FAIL {type(e).__name__}: {str(e)[:200]}"
        return fn
    return deco

@check("device_name")
def _(): return torch.cuda.get_device_name(0)
@check("device_props")
def _(): p = torch.cuda.get_device_properties(0); return (p.total_memory // 2**30, p.multi_processor_count, p.major, p.minor)
@check("mem_get_info")
def _(): return tuple(x // 2**30 for x in torch.cuda.mem_get_info())
@check("capability")
def _(): return torch.cuda.get_device_capability()
@check("bf16_supported")
def _(): return torch.cuda.is_bf16_supported()
@check("cudnn_benchmark")
def _(): torch.backends.cudnn.benchmark = True; return torch.backends.cudnn.is_available()
@check("set_float32_matmul_precision")
def _(): torch.set_float32_matmul_precision("high")
@check("events_timing")
def _():
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    x = torch.randn(4096, 4096, device="cuda")
    s.record(); y = x @ x; e.record(); torch.cuda.synchronize()
    return round(s.elapsed_time(e), 3)
@check("nvtx")
def _():
    torch.cuda.nvtx.range_push("a"); torch.cuda.nvtx.range_pop()
    with torch.cuda.nvtx.range("b"): pass
@check("record_function")
def _():
    with torch.autograd.profiler.record_function("blk"): torch.ones(2, device="cuda") * 2
@check("checkpoint")
def _():
    from torch.utils.checkpoint import checkpoint
    lin = nn.Linear(64, 64).cuda(); x = torch.randn(8, 64, device="cuda", requires_grad=True)
    checkpoint(lin, x, use_reentrant=False).sum().backward()
    checkpoint(lin, x, use_reentrant=True).sum().backward()
@check("grad_scaler")
def _():
    m = nn.Linear(16, 16).cuda(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
    sc = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = m(torch.randn(4, 16, device="cuda")).sum()
    sc.scale(loss).backward(); sc.unscale_(opt); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    sc.step(opt); sc.update(); return sc.get_scale()
@check("old_amp_api")
def _():
    with torch.cuda.amp.autocast():
        torch.ones(2, 2, device="cuda") @ torch.ones(2, 2, device="cuda")
    torch.cuda.amp.GradScaler()
@check("save_load")
def _():
    m = nn.Linear(8, 8).cuda(); opt = torch.optim.AdamW(m.parameters())
    m(torch.randn(2, 8, device="cuda")).sum().backward(); opt.step()
    with tempfile.TemporaryDirectory() as d:
        torch.save({"m": m.state_dict(), "o": opt.state_dict()}, f"{d}/c.pt")
        sd = torch.load(f"{d}/c.pt", map_location="cuda"); m.load_state_dict(sd["m"]); opt.load_state_dict(sd["o"])
        sd2 = torch.load(f"{d}/c.pt", map_location="cpu", weights_only=True)
    return list(sd2["m"])
@check("item_tolist")
def _():
    x = torch.randn(10, device="cuda"); return (type(x.sum().item()).__name__, len(x.tolist()), bool((x > 100).any()))
@check("numpy_roundtrip")
def _():
    import numpy as np
    a = torch.randn(3, device="cuda").cpu().numpy(); return torch.from_numpy(np.ones(3)).cuda().dtype
@check("manual_seed_all")
def _(): torch.cuda.manual_seed_all(0); torch.manual_seed(0); return torch.cuda.initial_seed()
@check("rng_state")
def _(): s = torch.cuda.get_rng_state(); torch.cuda.set_rng_state(s); return s.numel()
@check("empty_cache_stats")
def _():
    torch.cuda.empty_cache(); st = torch.cuda.memory_stats(); torch.cuda.reset_peak_memory_stats()
    return (torch.cuda.memory_allocated() >= 0, "allocated_bytes.all.peak" in st, len(torch.cuda.memory_summary()) > 0)
@check("pin_nonblocking")
def _():
    x = torch.randn(1024, 1024).pin_memory(); y = x.to("cuda", non_blocking=True); torch.cuda.current_stream().synchronize()
    return y.is_cuda
@check("streams")
def _():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        z = torch.ones(1000, device="cuda") * 2
    torch.cuda.current_stream().wait_stream(s); return z.sum().item()
@check("dataloader_workers")
def _():
    ds = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    dl = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2, pin_memory=True, shuffle=True)
    return sum(b[0].shape[0] for b in dl)
@check("tqdm")
def _():
    try:
        from tqdm import tqdm
    except ImportError:
        return "no tqdm"
    for _ in tqdm(range(3), disable=False, file=sys.stderr): torch.ones(1, device="cuda")
@check("compile_disable_decorator")
def _():
    @torch.compiler.disable
    def f(x): return x * 2
    return f(torch.ones(2, device="cuda")).sum().item()
@check("channels_last_conv")
def _():
    c = nn.Conv2d(3, 8, 3).cuda().to(memory_format=torch.channels_last)
    return c(torch.randn(2, 3, 16, 16, device="cuda").to(memory_format=torch.channels_last)).is_contiguous(memory_format=torch.channels_last)
@check("sdpa_kernel_ctx")
def _():
    from torch.nn.attention import sdpa_kernel, SDPBackend
    q = torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION): F.scaled_dot_product_attention(q, q, q, is_causal=True)
@check("lr_scheduler")
def _():
    m = nn.Linear(2, 2).cuda(); opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    sch = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=10)
    for _ in range(3): opt.step(); sch.step()
    return round(sch.get_last_lr()[0], 6)
@check("ema_swa")
def _():
    m = nn.Linear(4, 4).cuda(); ema = torch.optim.swa_utils.AveragedModel(m, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.99))
    ema.update_parameters(m)
@check("subprocess_nvidia_smi")
def _():
    import subprocess
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=5).stdout.strip()[:60]
    except FileNotFoundError:
        return "no nvidia-smi"
@check("env_visible_devices")
def _(): return (os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count(), torch.cuda.current_device())
@check("time_perf_counter_sync")
def _():
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); torch.cuda.synchronize()
    t = time.perf_counter(); y = x @ x; torch.cuda.synchronize(); return round((time.perf_counter() - t) * 1e3, 3)
@check("signal_handler")
def _():
    old = signal.signal(signal.SIGUSR1, lambda *a: results.__setitem__("got_usr1", "ok")); os.kill(os.getpid(), signal.SIGUSR1); signal.signal(signal.SIGUSR1, old)
@check("deterministic")
def _():
    torch.use_deterministic_algorithms(True, warn_only=True); x = torch.zeros(10, device="cuda"); x.index_add_(0, torch.tensor([1, 1], device="cuda"), torch.ones(2, device="cuda")); torch.use_deterministic_algorithms(False)
@check("grad_clip_foreach_norm")
def _():
    m = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)).cuda(); m(torch.randn(2, 8, device="cuda")).sum().backward()
    return round(float(torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0, foreach=True)), 4) >= 0
@check("sparse_embedding_bag")
def _():
    e = nn.EmbeddingBag(100, 8, mode="mean").cuda(); return tuple(e(torch.randint(0, 100, (4, 3), device="cuda")).shape)
@check("complex_fft")
def _(): return torch.fft.rfft(torch.randn(4, 256, device="cuda")).dtype
@check("torch_func_vmap_grad")
def _():
    from torch.func import vmap, grad
    return tuple(vmap(grad(lambda x: (x ** 2).sum()))(torch.randn(3, 4, device="cuda")).shape)
@check("distributions")
def _():
    d = torch.distributions.Normal(torch.zeros(3, device="cuda"), torch.ones(3, device="cuda")); return tuple(d.sample((2,)).shape)
@check("multinomial")
def _(): return tuple(torch.multinomial(torch.softmax(torch.randn(4, 10, device="cuda"), -1), 2).shape)
for k, v in results.items():
    print(f"{k:28s} {v}")
print("FAILED:", [k for k, v in results.items() if v.startswith("FAIL")])
