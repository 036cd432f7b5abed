"""What real training scripts also do (issue: DataLoader workers + pin_memory, seeds, backend
flags, torch.compile, nvtx ranges, AMP with GradScaler, custom ops)."""
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

mode = sys.argv[1]

if mode == "train":
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    data = TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))
    loader = DataLoader(data, batch_size=16, num_workers=2, pin_memory=True, shuffle=True)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).cuda()
    model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    steps = 0
    for epoch in range(2):
        for x, y in loader:
            assert x.is_pinned(), "DataLoader(pin_memory=True) must pin"
            x = x.cuda(non_blocking=True)
            y = y.cuda(non_blocking=True)
            torch.cuda.nvtx.range_push("forward")
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(x), y)
            torch.cuda.nvtx.range_pop()
            with torch.cuda.nvtx.range("backward"):
                scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            steps += 1
    torch.cuda.synchronize()
    print("steps", steps, "scale", scaler.get_scale(), "time", round(time.perf_counter(), 6))
elif mode == "custom_op":
    @torch.library.custom_op("phantora_test::no_fake", mutates_args=())
    def no_fake(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    y = no_fake(torch.randn(8, 16, device="cuda"))
    print("unreachable", y.shape)
elif mode == "custom_op_refusing_fake":
    @torch.library.custom_op("phantora_test::picky", mutates_args=())
    def picky(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @picky.register_fake
    def _(x):
        torch._check(x.dtype == torch.bfloat16, lambda: f"Expected a BF16 input, got {x.dtype}")
        return torch.empty_like(x)

    y = picky(torch.randn(8, 16, device="cuda"))
    print("unreachable", y.shape)
elif mode == "custom_op_fake":
    @torch.library.custom_op("phantora_test::with_fake", mutates_args=())
    def with_fake(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @with_fake.register_fake
    def _(x):
        return torch.empty_like(x)

    x = torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with_fake(x)
    torch.cuda.synchronize()
    print(f"custom_ms {(time.perf_counter() - t0) * 1e3:.3f}")
