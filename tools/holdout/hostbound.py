"""Host-bound training loops for issue #15 (host time): the CPU, not the GPU, sets the pace.

    python tools/holdout/hostbound.py --case loader0       # per-sample Dataset, DataLoader(num_workers=0)
    python tools/holdout/hostbound.py --case loader4       # the same with 4 worker processes, pin_memory
    python tools/holdout/hostbound.py --case trainer       # a Trainer-style loop: callbacks, metrics, AMP, clipping
    python tools/holdout/hostbound.py --case pyheavy       # many small modules and Python per step

Plain PyTorch; prints `step N time_ms X` and a RESULT line (loop.py), where a step is one
batch of the loop *including* fetching it from the DataLoader, as a user timing their epoch
sees it. Nothing here is simulator-specific.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from loop import base_parser, run_loop


class SyntheticText(Dataset):
    """Per-sample CPU work like a tokenizing text dataset: build a string, hash words into ids,
    pad, make tensors. Deterministic in the index."""

    def __init__(self, n: int, seq: int, vocab: int):
        self.n, self.seq, self.vocab = n, seq, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        words = [f"w{(i * 31 + j * 17) % 997}" for j in range(self.seq)]
        ids = [sum(ord(c) for c in w) % self.vocab for w in words]
        x = torch.tensor(ids[:-1], dtype=torch.long)
        y = torch.tensor(ids[1:], dtype=torch.long)
        return x, y


class SyntheticImages(Dataset):
    """Per-sample CPU tensor work like an image pipeline: random crop, flip, normalize."""

    def __init__(self, n: int, size: int):
        self.n, self.size = n, size
        g = torch.Generator().manual_seed(0)
        self.base = torch.rand(3, size + 32, size + 32, generator=g)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        o = (i * 7) % 32
        img = self.base[:, o:o + self.size, o:o + self.size]
        if i % 2:
            img = img.flip(-1)
        img = (img - 0.45) / 0.225
        return img.contiguous(), i % 1000


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                                    for _ in range(layers))
        self.out = nn.Linear(d, vocab)

    def forward(self, x):
        h = self.emb(x)
        for b in self.blocks:
            h = h + b(h)
        return self.out(h)


# ---------------------------------------------------------------- a Trainer-style loop

class Callback:
    def on_step_begin(self, trainer, step): ...
    def on_step_end(self, trainer, step, logs): ...


class ThroughputLogger(Callback):
    def __init__(self):
        self.seen = 0

    def on_step_end(self, trainer, step, logs):
        self.seen += logs["batch_size"]
        if step % 5 == 0:
            logs["throughput"] = self.seen


class MetricAverager(Callback):
    def __init__(self):
        self.sums: dict[str, float] = {}

    def on_step_end(self, trainer, step, logs):
        for k, v in logs.items():
            if isinstance(v, (int, float)):
                self.sums[k] = self.sums.get(k, 0.0) + v


class Trainer:
    """What HF/Lightning-style trainers do around a step: callbacks, AMP with a GradScaler,
    gradient clipping, an LR scheduler, a loss read every step (.item()), metrics."""

    def __init__(self, model, opt, sched, callbacks):
        self.model, self.opt, self.sched, self.callbacks = model, opt, sched, callbacks
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, batch, i: int) -> dict:
        for cb in self.callbacks:
            cb.on_step_begin(self, i)
        x, y = (t.to("cuda", non_blocking=True) for t in batch)
        with torch.autocast("cuda", dtype=torch.float16):
            logits = self.model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.view(-1))
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.opt)
        gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)
        self.sched.step()
        logs = {"loss": loss.item(), "grad_norm": float(gnorm), "lr": self.sched.get_last_lr()[0],
                "batch_size": x.shape[0]}
        for cb in self.callbacks:
            cb.on_step_end(self, i, logs)
        return logs


# ---------------------------------------------------------------- cases

def _loader_case(a, workers: int):
    ds = SyntheticText(a.batch * (a.steps + 4), a.seq + 1, 8192)
    dl = DataLoader(ds, batch_size=a.batch, shuffle=False, num_workers=workers, pin_memory=True,
                    persistent_workers=workers > 0)
    model = TinyLM(8192, 256, 2).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(batch):
        x, y = (t.cuda(non_blocking=True) for t in batch)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return dl, step


def _trainer_case(a):
    ds = SyntheticImages(a.batch * (a.steps + 4), 64)
    dl = DataLoader(ds, batch_size=a.batch, shuffle=False, num_workers=2, pin_memory=True, persistent_workers=True)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1),
                          nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 1000))
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, 1000) / 1000)))
    trainer = Trainer(_ImgWrap(model), opt, sched, [ThroughputLogger(), MetricAverager()])
    return dl, lambda batch, i=[0]: (trainer.step(batch, i[0]), i.__setitem__(0, i[0] + 1))


class _ImgWrap(nn.Module):
    """Makes the image model fit the Trainer's token-style loss: logits [B, 1, C], targets [B, 1]."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x).unsqueeze(1)


def _pyheavy_case(a):
    """Many small layers and per-parameter Python (a for-loop optimizer): host-bound by design."""
    layers = [nn.Linear(64, 64) for _ in range(48)]
    model = nn.Sequential(*[m for l in layers for m in (l, nn.Tanh())]).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(32, 64, device="cuda")

    class Fixed:
        def __iter__(self):
            while True:
                yield (x,)

    def step(batch):
        loss = model(batch[0]).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Fixed(), step


def main() -> None:
    p = base_parser(__doc__)
    p.add_argument("--case", required=True, choices=("loader0", "loader4", "trainer", "pyheavy"))
    p.add_argument("--fixed-batch", action="store_true", help="reuse the first batch (no DataLoader during the steps)")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--seq", type=int, default=256)
    a = p.parse_args()
    torch.manual_seed(0)
    a.batch = a.batch or {"loader0": 32, "loader4": 32, "trainer": 64, "pyheavy": 32}[a.case]
    if a.case in ("loader0", "loader4"):
        dl, step = _loader_case(a, 0 if a.case == "loader0" else 4)
    elif a.case == "trainer":
        dl, step = _trainer_case(a)
    else:
        dl, step = _pyheavy_case(a)
    it = iter(dl)
    if a.fixed_batch:  # one batch, then the workers are shut down: the step without data loading beside it
        batch = next(it)
        del it
        it = iter(lambda: batch, None)
    run_loop(a, lambda i: step(next(it)), {"workload": f"hostbound:{a.case}",
                                           **{k: v for k, v in vars(a).items() if k != "profile_dir"}})

if __name__ == "__main__":
    main()
