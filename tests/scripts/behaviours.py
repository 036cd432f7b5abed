"""Small behaviours the end-to-end tests check: argv, __main__, exit codes, exceptions."""
import sys

import torch

mode = sys.argv[1]
if mode == "argv":
    print("argv", sys.argv)
    print("main", __name__)
elif mode == "exit":
    print("exiting", flush=True)
    sys.exit(int(sys.argv[2]))
elif mode == "raise":
    x = torch.ones(4, device="cuda")
    raise ValueError("user error from the script")
elif mode == "cuda":
    print("available", torch.cuda.is_available(), "count", torch.cuda.device_count())
    print("name", torch.cuda.get_device_name(0))
    print("capability", torch.cuda.get_device_capability())
    p = torch.cuda.get_device_properties(0)
    print("props", p.name, p.total_memory, p.multi_processor_count)
    x = torch.randn(1024, 1024, device="cuda")
    y = x @ x
    print("device", y.device, "shape", tuple(y.shape), "dtype", y.dtype)
    print("item", y.sum().item(), "bool", bool((y > 0).all()))
    print("cpu", y.cpu().shape, y.cpu().device)
    print("pinned", torch.randn(4).pin_memory().is_pinned())
    print("allocated", torch.cuda.memory_allocated())
    # printed as a real CUDA tensor prints: values where they exist, zeros where they do not
    v = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3) / 8
    p = torch.nn.Parameter(torch.full((3,), 0.25, device="cuda"))
    s = (p * 2).sum()
    print(f"repr {v!r}|{p!r}|{s}|{s!r}|{y[:2]}|format {s:.2f} {s:>8.3f}")
    try:
        v.numpy()
    except TypeError as e:
        print("numpy", e, v.numpy(force=True).tolist())
elif mode == "unsupported":
    x = torch.randn(1 << 16, device="cuda")  # too large for values (runtime/dispatch/values.py)
    idx = torch.nonzero(x > 0)
    print("nonzero shape", tuple(idx.shape))
elif mode == "sync":
    # an op whose output size depends on the data waits for the GPU, as its CUDA kernel does
    import time

    a = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    b = a @ a
    t1 = time.perf_counter()
    n = torch.nonzero(b[0] > 0)
    t2 = time.perf_counter()
    print(f"sync launch_ms {(t1 - t0) * 1e3:.3f} after_nonzero_ms {(t2 - t0) * 1e3:.3f}")
    # a pageable host-to-device copy blocks the host until the GEMM queued before it has run,
    # an empty one makes no CUDA call (BLOOM moves empty tensors to the GPU every layer)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    b = a @ a
    e = torch.tensor([]).to("cuda")
    t1 = time.perf_counter()
    f = torch.tensor([1.0]).to("cuda")
    t2 = time.perf_counter()
    print(f"sync empty_copy_ms {(t1 - t0) * 1e3:.3f} copy_ms {(t2 - t0) * 1e3:.3f}")
elif mode == "ctc":
    # a speech model's CTC loss (HF wav2vec2: inside cudnn.flags(enabled=False), lengths as tensors)
    import torch.nn.functional as F

    logits = torch.randn(50, 4, 20, device="cuda", requires_grad=True)
    labels = torch.randint(1, 20, (4, 12), device="cuda")
    labels[:, 9:] = -100  # padding, as a data collator writes it
    mask = labels >= 0
    targets, target_lengths = labels.masked_select(mask), mask.sum(-1)
    input_lengths = torch.full((4,), 50, dtype=torch.long, device="cuda")
    with torch.backends.cudnn.flags(enabled=False):
        loss = F.ctc_loss(logits.log_softmax(2), targets, input_lengths, target_lengths)
    loss.backward()
    padded = F.ctc_loss(logits.log_softmax(2), labels.clamp(min=1), [50] * 4, [9] * 4)
    # lengths as CPU tensors, as torch's own CTCLoss example makes them (runs on a GPU)
    cpu_lengths = F.ctc_loss(logits.log_softmax(2), labels.clamp(min=1), torch.full((4,), 50), torch.full((4,), 9))
    print("ctc", tuple(targets.shape), target_lengths.tolist(), tuple(loss.shape), tuple(logits.grad.shape),
          tuple(padded.shape), torch.backends.cudnn.benchmark_limit, torch.backends.cudnn.enabled,
          tuple(cpu_lengths.shape), cpu_lengths.device.type)
elif mode == "encoder_padding":
    # nn.TransformerEncoder's inference fast path with a padding mask (nested tensors on a GPU);
    # the module was moved to CUDA after construction, as scripts do
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 2)
    enc = enc.to("cuda").eval()
    pad = torch.zeros(3, 10, dtype=torch.bool, device="cuda")
    pad[:, 7:] = True
    with torch.inference_mode():
        y = enc(torch.randn(3, 10, 64, device="cuda"), src_key_padding_mask=pad)
        z = enc(torch.randn(3, 10, 64, device="cuda"))
    print("encoder", tuple(y.shape), tuple(z.shape), enc.use_nested_tensor)
elif mode == "packed":
    # variable-length batches through an LSTM: lengths on the CPU, as CUDA requires
    rnn = torch.nn.LSTM(16, 32, batch_first=True).cuda()
    x = torch.randn(4, 9, 16, device="cuda", requires_grad=True)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([9, 6, 6, 2]), batch_first=True)
    out, _ = rnn(packed)
    padded, lengths = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=12)
    padded.sum().backward()
    print("packed", tuple(packed.data.shape), packed.batch_sizes.tolist(), tuple(padded.shape), lengths.tolist(),
          tuple(x.grad.shape))
elif mode == "dataparallel":
    # an older single-process script: DataParallel over every GPU the process sees
    import torch.cuda.comm as comm
    dp = torch.nn.DataParallel(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(),
                                                   torch.nn.Linear(16, 4))).cuda()
    opt = torch.optim.SGD(dp.parameters(), lr=0.1)
    for _ in range(2):
        out = dp(torch.randn(8, 16).cuda())
        out.sum().backward()
        opt.step()
        opt.zero_grad()
    parts = comm.scatter(torch.randn(6, 2, device="cuda"), list(range(torch.cuda.device_count())))
    print("dataparallel", torch.cuda.device_count(), tuple(out.shape), out.device, [tuple(p.shape) for p in parts],
          tuple(comm.gather(parts, 0, destination=0).shape))
elif mode == "threads":
    # a prefetch thread of the script's own moves batches to the GPU on its stream
    import queue
    import threading

    q = queue.Queue()

    def prefetch():
        s = torch.cuda.Stream()
        for _ in range(3):
            with torch.cuda.stream(s):
                q.put((torch.randn(4, 8).pin_memory().to("cuda", non_blocking=True) * 2, s.record_event()))
        q.put(None)

    t = threading.Thread(target=prefetch)
    t.start()
    w, n = torch.randn(8, 8, device="cuda"), 0
    while (item := q.get()) is not None:
        torch.cuda.current_stream().wait_event(item[1])
        n += int((item[0] @ w).shape[0])
    t.join()
    torch.cuda.synchronize()
    print("threads", n)
elif mode == "sleeping_thread":
    # a progress bar's refresh loop on a thread of its own sleeps while the program trains
    import threading
    import time

    done = threading.Event()

    def refresh():
        while not done.is_set():
            time.sleep(0.01)

    t = threading.Thread(target=refresh, daemon=True)
    t.start()
    w = torch.randn(1024, 1024, device="cuda")
    t0 = time.perf_counter()
    for _ in range(20):
        x = (w @ w).relu()
        torch.cuda.synchronize()
        time.sleep(0.001)  # the program's own wait takes simulated time
    elapsed = time.perf_counter() - t0
    done.set()
    t.join()
    print("sleeping_thread", 0.02 <= elapsed < 0.05, round(elapsed, 4))
elif mode == "data_setter":
    # `p.data = p.to("cuda")`: the Parameter object stays, now on the GPU (FSDP1, DeepSpeed, old code)
    lin = torch.nn.Linear(8, 4)
    w = lin.weight
    w.data = w.data.to("cuda")
    lin.bias.data = lin.bias.to("cuda", torch.bfloat16)
    y = lin.weight @ torch.randn(8, device="cuda")
    print("data_setter", lin.weight is w, w.device, isinstance(w, torch.nn.Parameter), w.requires_grad,
          lin.bias.dtype, tuple(y.shape))
elif mode == "data_roundtrip":
    # attributes a program puts on its parameters survive the move to the GPU (param groups,
    # Megatron's marks), and `p.data = p.data.cpu()` (an offload) takes the parameter off the
    # simulated GPU and back, keeping its identity, its optimizer and its autograd
    lin = torch.nn.Linear(8, 8)
    lin.weight.no_weight_decay = True
    lin.cuda()
    w = lin.weight
    w.data = w.data.to("cpu")
    off = (w.device.type, type(w).__name__, isinstance(w, torch.nn.Parameter), w.no_weight_decay,
           tuple(torch.split(w, [4, 4])[0].shape), float((w * 0).sum().detach()))
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    held = w.view(-1)  # another tensor holds w's TensorImpl: the identity swap cannot be used back
    w.data = w.data.to("cuda")
    lin(torch.randn(2, 8, device="cuda")).sum().backward()
    opt.step()
    t = torch.ones(3, device="cuda")
    t.data = torch.zeros(3)
    print("data_roundtrip", off, lin.weight is w, w.device, w.grad.device, w.no_weight_decay, held.device,
          t.device, type(t).__name__, (t + 1).tolist())
elif mode == "ema_decode":
    # an EMA copy of the model (copy.deepcopy), cast for inference; greedy decoding at batch 1
    # (a Linear over one row: its bias is as large as its output)
    import copy

    model = torch.nn.Sequential(torch.nn.Embedding(100, 32), torch.nn.Linear(32, 100)).cuda()
    ema = copy.deepcopy(model)
    same_mode = ema[1].weight.fake_mode is model[1].weight.fake_mode
    with torch.no_grad():
        for pe, pm in zip(ema.parameters(), model.parameters()):
            pe.mul_(0.99).add_(pm, alpha=0.01)
    half = ema.half().eval()
    tok = torch.zeros(1, 1, dtype=torch.long, device="cuda")
    with torch.inference_mode():
        for _ in range(3):
            tok = half(tok)[:, -1:].argmax(-1)
    print("ema_decode", same_mode, half[1].weight.dtype, tuple(tok.shape), torch.cuda.memory_allocated() > 0)
elif mode == "lazy_modules":
    # lazy modules moved before their first forward (torch's documented pattern)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LazyLinear(10), torch.nn.LazyBatchNorm1d()).cuda()
    out = m(torch.randn(2, 4, device="cuda"))
    w = m[1].weight
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    out.sum().backward()
    opt.step()
    k = torch.nn.LazyLinear(3).cuda().half()
    y = k(torch.randn(2, 5, device="cuda", dtype=torch.half))
    c = torch.nn.LazyLinear(3).cuda().cpu()
    print("lazy_modules", isinstance(w, torch.nn.Parameter), tuple(w.shape), w.device, tuple(w.grad.shape),
          m[2].running_mean.device, y.dtype, k.weight.device, c(torch.randn(2, 5)).device)
elif mode == "sdpa_queries":
    # torch.backends.cuda's build and backend questions, as a CUDA wheel on the simulated H200 answers
    from torch.backends.cuda import SDPAParams

    q = torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.backends.cuda
    half, full = SDPAParams(q, q, q, None, 0.0, True, False), SDPAParams(q.float(), q.float(), q.float(), None, 0.0,
                                                                          True, False)
    print("sdpa_queries", b.is_built(), b.is_flash_attention_available(), b.can_use_flash_attention(half),
          b.can_use_efficient_attention(half), b.can_use_cudnn_attention(half), b.can_use_flash_attention(full),
          b.can_use_efficient_attention(full))
elif mode == "layouts":
    # memory formats as a GPU gives them where size-1 dims make them ambiguous: a 1x1 convolution
    # weight made channels-last by Module.to (its detach keeps the strides), empty_like with an
    # explicit format, and cuDNN's channels-last output for an NCHW input with that weight (a
    # ShuffleNet channel shuffle before a 1x1 convolution), then a batch norm on it
    conv = torch.nn.Conv2d(58, 58, 1, bias=False).cuda().to(memory_format=torch.channels_last)
    bn = torch.nn.BatchNorm2d(58).cuda()
    x = torch.randn(4, 2, 29, 7, 7, device="cuda").transpose(1, 2).contiguous().view(4, 58, 7, 7)
    w = conv.weight
    y = bn(conv(x))
    print("layouts", w.stride(), w.detach().stride(), torch.empty_like(w, memory_format=torch.channels_last).stride(),
          torch.nn.Parameter(w.detach()).stride(), y.stride(), torch.relu(torch.randn(16, 256, 1, 1, device="cuda")
                                                                         .to(memory_format=torch.channels_last)).stride(),
          torch.empty_like(torch.randn(16, 256, 1, 1, device="cuda").to(memory_format=torch.channels_last)).stride())
elif mode == "cells":
    # nn.GRUCell / nn.LSTMCell (fused CUDA cell kernels) with their backward, and the inference
    # fast path of nn.MultiheadAttention with a padding mask and attention weights
    gru, lstm = torch.nn.GRUCell(8, 16).cuda(), torch.nn.LSTMCell(8, 16).cuda()
    x = torch.randn(3, 8, device="cuda")
    h, c = lstm(x)
    (gru(x).sum() + h.sum()).backward()
    mha = torch.nn.MultiheadAttention(64, 4, batch_first=True).cuda().eval()
    q = torch.randn(2, 10, 64, device="cuda")
    mask = torch.zeros(2, 10, dtype=torch.bool, device="cuda")
    mask[:, -2:] = True
    with torch.inference_mode():
        o, w = mha(q, q, q, key_padding_mask=mask, need_weights=True)
        scores = torch.ops.aten._masked_softmax(torch.randn(2, 4, 10, 10, device="cuda"), mask.view(2, 1, 1, 10), 3, 2)
    print("cells", tuple(gru.weight_ih.grad.shape), tuple(lstm.weight_hh.grad.shape), tuple(o.shape), tuple(w.shape),
          tuple(scores.shape))
elif mode == "rare_ops":
    # CUDA kernels without a shape function in torch: torch.equal (eq + all + a host read, as
    # ATen's cuda_equal), torch.distributions' Dirichlet / Beta / Binomial samples, margin losses
    a, b = torch.tensor([1, 2], device="cuda"), torch.tensor([1, 3], device="cuda")
    d = torch.distributions
    ones = torch.ones(3, device="cuda")
    m = torch.randn(3, 4, device="cuda", requires_grad=True)
    loss = torch.nn.functional.multi_margin_loss(m, torch.tensor([0, 1, 2], device="cuda")) + \
        torch.nn.functional.multilabel_margin_loss(m, torch.tensor([[0, 1, -1, 0]] * 3, device="cuda"))
    # F.grid_sample at align_corners=True takes cuDNN's sampler on a CUDA build (RAFT's lookups)
    img = torch.randn(2, 3, 8, 8, device="cuda", requires_grad=True)
    grid = (torch.rand(2, 5, 6, 2, device="cuda") * 2 - 1).requires_grad_()
    sampled = torch.nn.functional.grid_sample(img, grid, align_corners=True)
    loss = loss + sampled.sum()
    loss.backward()
    print("grid_sample", tuple(sampled.shape), tuple(img.grad.shape), tuple(grid.grad.shape))
    print("rare_ops", torch.equal(a, a.clone()), torch.equal(a, b), torch.equal(a, a[:1]),
          torch.allclose(a.float(), a.float() + 1e-9), torch.allclose(a.float(), b.float()),
          tuple(d.Dirichlet(ones).sample().shape), tuple(d.Beta(ones, ones).rsample().shape),
          tuple(d.Binomial(10, ones / 2).sample().shape), tuple(m.grad.shape))
elif mode == "qat":
    # quantization-aware training: torch.ao.quantization's fused observer + fake-quantize modules
    # (per-tensor activations, per-channel weights), then the learnable fake quantization's ops
    import torch.ao.quantization as tq

    net = torch.nn.Sequential(tq.QuantStub(), torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16),
                              torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(16 * 14 * 14, 10),
                              tq.DeQuantStub()).cuda()
    net.qconfig = tq.get_default_qat_qconfig("x86")
    tq.prepare_qat(net, inplace=True)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        net(torch.randn(8, 3, 16, 16, device="cuda")).square().mean().backward()
        opt.step()
    x = torch.randn(64, 32, device="cuda", requires_grad=True)
    scale = torch.tensor([0.1], device="cuda", requires_grad=True)
    zp = torch.tensor([0.0], device="cuda", requires_grad=True)
    y = torch._fake_quantize_learnable_per_tensor_affine(x, scale, zp, 0, 255, 1.0)
    w = torch.randn(16, 32, device="cuda", requires_grad=True)
    yc = torch.fake_quantize_per_channel_affine(w, torch.full((16,), 0.1, device="cuda"),
                                                torch.zeros(16, dtype=torch.int32, device="cuda"), 0, -128, 127)
    (y.sum() + yc.sum()).backward()
    print("qat", tuple(net[1].weight.grad.shape), tuple(x.grad.shape), tuple(scale.grad.shape),
          tuple(zp.grad.shape), tuple(w.grad.shape))
elif mode == "jagged":
    # jagged nested tensors (variable-length sequences without padding): a Linear and SDPA over
    # them, forward and backward
    F = torch.nn.functional
    seqs = [torch.randn(30, 64), torch.randn(50, 64)]
    q = torch.nested.nested_tensor(seqs, device="cuda", layout=torch.jagged, requires_grad=True)
    y = torch.nn.Linear(64, 64).cuda()(q)
    heads = y.unflatten(-1, (4, 16)).transpose(1, 2)
    o = F.scaled_dot_product_attention(heads, heads, heads)
    o.values().sum().backward()
    print("jagged", q.size(0), tuple(y.values().shape), tuple(q.grad.values().shape), q.is_nested)
elif mode == "hub_kernels":
    import os

    print("hub_kernels", os.environ.get("USE_HUB_KERNELS"))
elif mode == "routing":
    # a mixture-of-experts router over simulated (large) activations: balanced choices
    x = torch.randn(4096, 512, device="cuda")
    probs = torch.nn.Linear(512, 8).cuda()(x).softmax(-1)
    weights, experts = probs.topk(2, dim=-1)
    counts = torch.bincount(experts.flatten(), minlength=8)
    hist = torch.histc(experts.flatten().float(), bins=8, min=0, max=7)
    tokens = [torch.where(experts == e)[0].numel() for e in range(8)]
    print("routing", counts.tolist(), [int(v) for v in hist.tolist()], tokens, experts[:2].tolist())
    print("split", [t.shape[0] for t in torch.split(x.repeat_interleave(2, 0), counts.tolist())][:3])
elif mode == "random":
    # a CUDA generator of the script's own; small tensors' data-dependent sizes from their values
    g = torch.Generator(device="cuda").manual_seed(3)
    idx = torch.randint(0, 1000, (64,), device="cuda", generator=g)
    n = int((idx.cpu() > 500).sum())
    print("exact", idx[idx > 500].numel() == n, torch.nonzero(idx > 500).shape[0] == n,
          torch.masked_select(idx, idx > 500).numel() == n, torch.unique(idx).numel() == len(set(idx.tolist())))
    print("sizes", n, torch.unique(idx).numel())
    p = torch.rand(16, device="cuda")  # the default CUDA generator: a fixed seed, as on a GPU
    print("draws", idx[:4].tolist(), torch.multinomial(p, 3, generator=g).tolist(),
          torch.randperm(8, device="cuda").tolist())
    print("generators", isinstance(g, torch.Generator), isinstance(torch.default_generator, torch.Generator),
          g.device, torch.cuda.default_generators[0].device, torch.Generator().device)
    torch.nn.init.normal_(torch.empty(8, device="cuda"), generator=torch.cuda.default_generators[0])
    try:
        torch.Generator(device="cuda:7")
    except RuntimeError as e:
        print("bad device:", e)
elif mode == "timing":
    import time

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    for _ in range(10):
        a @ a
    end.record()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    print(f"event_ms {start.elapsed_time(end):.4f} wall_ms {(t1 - t0) * 1e3:.4f}")
elif mode == "exit_effects":
    # what a script observes of the interpreter's exit: files left open are closed (their
    # last lines and a gzip trailer written), atexit handlers run, non-daemon threads finish
    import atexit
    import gzip
    import threading
    import time

    import torch.distributed  # noqa: F401 - has an object whose __class__ warns when read

    text = open(sys.argv[2], "w")
    text.write("left open\n")
    packed = gzip.open(sys.argv[3], "wt")
    packed.write("gzip left open\n")
    atexit.register(lambda: print("atexit handler ran", flush=True))

    def late():
        time.sleep(0.05)
        print("non-daemon thread finished", flush=True)

    threading.Thread(target=late).start()
    x = torch.ones(4, device="cuda")
    sys.exit(4)
elif mode == "progress_clocks":
    # progress bars and timeit read the simulated clock, even when imported before the
    # simulator installed it (torch's own imports bring tqdm in)
    import time
    import timeit

    t0 = timeit.default_timer()
    time.sleep(2.0)  # simulated: no real wait
    print(f"timeit {timeit.default_timer() - t0:.3f}")
    try:
        from tqdm import tqdm
    except ImportError:
        print("tqdm absent")
    else:
        bar = tqdm(total=2, disable=False)
        time.sleep(3.0)
        bar.update(2)
        print(f"tqdm elapsed {bar.format_dict['elapsed']:.1f}")
        bar.close()
elif mode == "cuda_version":
    # a CUDA wheel's torch.version.cuda, and what is gated on it: DDP's bf16 gradient compression
    # (frameworks ask too: transformers' TrainingArguments(tf32=True) refuses to run without it)
    import socket

    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    print("version.cuda", torch.version.cuda, "hip", torch.version.hip)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64).cuda())
    model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    print("bf16_compress_hook ran", tuple(model.module.weight.grad.shape))
    dist.destroy_process_group()
elif mode == "launch_env":
    # what a script reads to decide whether it was launched distributed (nanoGPT, accelerate)
    import os

    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "TORCHELASTIC_RUN_ID")
    print("launch env", sorted(n for n in names if n in os.environ))
