"""DataLoader-bound loops held out from every host-time fit (issue #15), chosen on 2026-12-06
before any real run of them; simulated first (real_h200/session39/), then measured once.

    python tools/holdout/loader_heldout.py --case dict_text    # dict batches (3 tensors), 2 workers, pin_memory
    python tools/holdout/loader_heldout.py --case many_small   # 17 tensors per batch, 2 workers, no pinning
    python tools/holdout/loader_heldout.py --case images_nopin # 128 px crops, 4 workers, no pinning
    python tools/holdout/loader_heldout.py --case custom_collate   # padding collate_fn, 3 workers (second set)
    python tools/holdout/loader_heldout.py --case pinned_features  # 9 tensors per batch, 6 workers, pinning (second set)

Plain PyTorch; a step is one batch of the loop including taking it from the DataLoader (as in
hostbound.py), printed as `step N time_ms X` and a RESULT line.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from hostbound import TinyLM  # this folder's
from loop import base_parser, run_loop
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Sized(Dataset):
    """A map-style dataset of `n` samples (every case's datasets)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


class DictText(Sized):
    """Tokenised text as HF-style dict samples: input ids, attention mask, labels."""

    def __init__(self, n: int, seq: int, vocab: int):
        super().__init__(n)
        self.seq, self.vocab = seq, vocab

    def __getitem__(self, i: int):
        ids = [(i * 131 + j * 7919) % self.vocab for j in range(self.seq + 1)]
        t = torch.tensor(ids, dtype=torch.long)
        length = self.seq - (i % 17)
        mask = torch.ones(self.seq, dtype=torch.long)
        mask[length:] = 0
        return {"input_ids": t[:-1], "attention_mask": mask, "labels": t[1:]}


class ManySmall(Sized):
    """Tabular-style samples: 16 small feature tensors and a label."""

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        return tuple(torch.randn(32, generator=g) for _ in range(16)) + (i % 10,)


class Crops(Sized):
    """Random 128 px crops and flips of a fixed image, normalised."""

    def __init__(self, n: int):
        super().__init__(n)
        self.base = torch.rand(3, 192, 192, generator=torch.Generator().manual_seed(1))

    def __getitem__(self, i: int):
        o = (i * 13) % 64
        img = self.base[:, o:o + 128, o:o + 128]
        if i % 3 == 0:
            img = img.flip(-2)
        return ((img - 0.5) / 0.25).contiguous(), i % 100


class VarLenText(Sized):
    """Variable-length token lists, padded per batch by a custom collate_fn (session 39, second set)."""

    def __init__(self, n: int, vocab: int):
        super().__init__(n)
        self.vocab = vocab

    def __getitem__(self, i: int):
        length = 96 + (i * 37) % 160
        return [(i * 17 + j * 101) % self.vocab for j in range(length)]


def pad_collate(samples):
    """Pads to the longest sample: a plain tensor (not in shared memory; pickling moves it there)."""
    longest = max(len(s) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.long)
    mask = torch.zeros(len(samples), longest, dtype=torch.long)
    for k, s in enumerate(samples):
        ids[k, :len(s)] = torch.tensor(s)
        mask[k, :len(s)] = 1
    return ids, mask


class Features(Sized):
    """Per-sample dict of eight small feature tensors (a recommender-style batch)."""

    def __getitem__(self, i: int):
        return {f"f{k}": torch.full((16,), float(i + k)) for k in range(8)} | {"y": i % 2}


def update(loss, opt) -> None:
    """Every case's backward and optimizer step."""
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def build(case: str, steps: int):
    n_batches = steps + 8
    if case == "dict_text":
        ds = DictText(16 * n_batches, 256, 8192)
        dl = DataLoader(ds, batch_size=16, num_workers=2, pin_memory=True, persistent_workers=True)
        model = TinyLM(8192, 256, 3).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(b):
            x, m, y = (b[k].cuda(non_blocking=True) for k in ("input_ids", "attention_mask", "labels"))
            logits = model(x)
            loss = (F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), reduction="none") * m.view(-1)).mean()
            update(loss, opt)
    elif case == "many_small":
        ds = ManySmall(64 * n_batches)
        dl = DataLoader(ds, batch_size=64, num_workers=2, pin_memory=False, persistent_workers=True)
        model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step(b):
            x = torch.cat([t.cuda() for t in b[:-1]], dim=1)
            loss = F.cross_entropy(model(x), b[-1].cuda())
            update(loss, opt)
    elif case == "custom_collate":
        ds = VarLenText(32 * n_batches, 8192)
        dl = DataLoader(ds, batch_size=32, num_workers=3, collate_fn=pad_collate, persistent_workers=True)
        model = TinyLM(8192, 192, 2).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(b):
            x, m = b[0].cuda(), b[1].cuda()
            logits = model(x)
            loss = (F.cross_entropy(logits.view(-1, logits.size(-1)), x.view(-1), reduction="none") * m.view(-1)).mean()
            update(loss, opt)
    elif case == "pinned_features":
        ds = Features(256 * n_batches)
        dl = DataLoader(ds, batch_size=256, num_workers=6, pin_memory=True, persistent_workers=True)
        model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 1)).cuda()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def step(b):
            x = torch.cat([b[f"f{k}"].cuda(non_blocking=True) for k in range(8)], dim=1)
            loss = F.binary_cross_entropy_with_logits(model(x).squeeze(1), b["y"].cuda(non_blocking=True).float())
            update(loss, opt)
    else:
        ds = Crops(32 * n_batches)
        dl = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=False, persistent_workers=True)
        model = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 100)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(b):
            x, y = b[0].cuda(), b[1].cuda()
            loss = F.cross_entropy(model(x), y)
            update(loss, opt)
    return dl, step


def main() -> None:
    p = base_parser(__doc__)
    p.add_argument("--case", required=True, choices=("dict_text", "many_small", "images_nopin", "custom_collate", "pinned_features"))
    p.add_argument("--fixed-batch", action="store_true", help="reuse the first batch (no DataLoader during the steps)")
    a = p.parse_args()
    torch.manual_seed(0)
    a.steps = max(a.steps, 16)
    dl, step = build(a.case, a.steps)
    it = iter(dl)
    if a.fixed_batch:  # one batch, then the workers are shut down: the step without data loading beside it
        batch = next(it)
        del it
        it = iter(lambda: batch, None)
    run_loop(a, lambda i: step(next(it)), {"workload": f"loader_heldout:{a.case}", "case": a.case})

if __name__ == "__main__":
    main()
