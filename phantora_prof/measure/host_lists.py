"""Host time per call of ops over tensor lists, by list length (issue #15).

    python -m phantora_prof.measure.host_lists --out lists.json            # on a GPU: the real host
    phantora-prof python -m phantora_prof.measure.host_lists --out s.json  # the simulated host

torch.optim's default (foreach) and fused optimizers, clip_grad_norm_ and torch.cat / stack
take lists of tensors: their host time grows with the list's length (a TensorImpl check,
a chunk of kernel arguments, for out-of-place ops an allocation and a Python object per
tensor). A zoo model's AdamW step calls each foreach op once over ~150-350 parameters, and
under cProfile on the H200 host one `_foreach_sqrt` took 444-649 us where the host model
charged a flat 21 us (tools/holdout/real_h200/session11/).

Every op is timed on lists of 1..256 CUDA tensors of 4096 float32 elements (the GPU work is
negligible: the host is what is timed; the loop does not synchronize, and the queue never
fills), the median over rounds of the mean host time per call. Beside them, a few plain ops
on one tensor (the per-op baseline: a host's speed relative to the reference one) and ops on
CPU scalars (optimizer step counters), and whole `optimizer.step()` calls of torch.optim's
foreach, fused and for-loop implementations by parameter count. Under phantora-prof the same script reads the
simulated clock, so one comparison says what the host model gets wrong, per op and per
tensor (phantora-prof calibrate host-lists).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch

LENGTHS = (1, 4, 16, 64, 256)
NUMEL = 4096


def _lists(n: int, k: int, device: str, numel: int = NUMEL) -> list[list[torch.Tensor]]:
    return [[torch.rand(numel, device=device) + 0.5 for _ in range(n)] for _ in range(k)]


def list_ops(device: str) -> dict[str, Callable[[int], Callable[[], object]]]:
    """Name -> (list length -> a call to time)."""

    def foreach(fn: Callable, k: int, *extra, numel: int = NUMEL, **kw) -> Callable[[int], Callable[[], object]]:
        def make(n: int):
            ls = _lists(n, k, device, numel)
            return lambda: fn(*ls, *extra, **kw)
        return make

    def fused_adamw(n: int):
        p, g, m, v = _lists(n, 4, device)
        steps = [torch.zeros((), device=device) for _ in range(n)]
        return lambda: torch._fused_adamw_(p, g, m, v, [], steps, lr=1e-3, beta1=0.9, beta2=0.999,
                                           weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)

    def cat(fn):
        def make(n: int):
            (xs,) = _lists(n, 1, device)
            return lambda: fn(xs)
        return make

    return {
        "_foreach_add_.Scalar": foreach(torch._foreach_add_, 1, 1.0),
        "_foreach_mul_.Scalar": foreach(torch._foreach_mul_, 1, 0.9),
        "_foreach_add_.List": foreach(torch._foreach_add_, 2),
        # out of place with alpha: SGD's weight decay (grads + weight_decay * params, new tensors)
        "_foreach_add.List": foreach(torch._foreach_add, 2, alpha=1e-4),
        # the same over 1M-element tensors (a model's weights: the caching allocator's large pool
        # for the outputs, several kernel launches per list)
        "_foreach_add.List@1M": foreach(torch._foreach_add, 2, alpha=1e-4, numel=1 << 20),
        "_foreach_add_.List@1M": foreach(torch._foreach_add_, 2, numel=1 << 20),
        "_foreach_lerp_.Scalar": foreach(torch._foreach_lerp_, 2, 0.1),
        "_foreach_addcmul_.Scalar": foreach(torch._foreach_addcmul_, 3, value=0.1),
        "_foreach_addcdiv_.Scalar": foreach(torch._foreach_addcdiv_, 3, value=0.1),
        "_foreach_sqrt": foreach(torch._foreach_sqrt, 1),
        "_foreach_norm": foreach(torch._foreach_norm, 1),
        "_foreach_zero_": foreach(torch._foreach_zero_, 1),
        "_fused_adamw_": fused_adamw,
        "cat": cat(torch.cat),
        "stack": cat(torch.stack),
        # torch.optim's step counters: 0-dim CPU tensors, all incremented by one foreach call
        "cpu_scalars_foreach_add_": lambda n: (lambda ts=[torch.zeros(()) for _ in range(n)]:
                                              torch._foreach_add_(ts, 1.0)),
    }


def single_ops(device: str) -> dict[str, Callable[[], object]]:
    x = torch.rand(NUMEL, device=device)
    y = torch.rand(NUMEL, device=device)
    step = torch.zeros(())  # a CPU step counter, as torch.optim keeps it
    return {
        "add_": lambda: x.add_(1.0),
        "add": lambda: torch.add(x, y),
        "view": lambda: x.view(-1),
        "cpu_scalar_add_": lambda: step.add_(1),
        "cpu_scalar_item": lambda: step.item(),
        "cpu_scalar_tensor": lambda: torch.tensor(1.0),
    }


OPTIMIZERS: dict[str, Callable[[list], torch.optim.Optimizer]] = {
    "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True),
    "adamw_fused": lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True),
    "adamw_forloop": lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=False),
    "adam_foreach": lambda ps: torch.optim.Adam(ps, lr=1e-3, foreach=True),
    "sgd_momentum_foreach": lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9, foreach=True),
    # torchvision's classification recipe: weight decay takes an out-of-place _foreach_add
    "sgd_momentum_wd_foreach": lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9, weight_decay=1e-4,
                                                          foreach=True),
}
OPTIMIZER_LENGTHS = (16, 64, 256)


def optimizer_steps(device: str) -> dict[str, Callable[[int], Callable[[], object]]]:
    """Name -> (parameter count -> one `optimizer.step()`): the whole step's host time, its
    aten ops and torch.optim's Python around them (per parameter: _init_group's walk, state
    lookups, step counters)."""

    def make(factory):
        def build(n: int):
            ps = [torch.nn.Parameter(torch.rand(NUMEL, device=device)) for _ in range(n)]
            for p in ps:
                p.grad = torch.rand(NUMEL, device=device)
            opt = factory(ps)
            return opt.step
        return build
    return {name: make(f) for name, f in OPTIMIZERS.items()}


def time_call(fn: Callable[[], object], calls: int, rounds: int, sync: Callable[[], None]) -> float:
    """Median over rounds of the mean host ns per call (no sync inside a round)."""
    for _ in range(3):
        fn()
    sync()
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter_ns() - t0) / calls)
        sync()
    return statistics.median(per)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default=None,
                    help="comma-separated list ops and optimizers to time (default: all; the single ops always run)")
    a = ap.parse_args(argv)
    only = set(a.only.split(",")) if a.only else None
    if not torch.cuda.is_available():
        print("host_lists: needs a CUDA device (a real one, or phantora-prof's simulated one)", file=sys.stderr)
        return 2
    device = "cuda"
    sync = torch.cuda.synchronize
    out: dict = {"host": {"python": platform.python_version(), "torch": torch.__version__,
                          "processor": platform.processor()},
                 "numel": NUMEL, "lists": {}, "optimizers": {}, "single": {}}
    for name, make in list_ops(device).items():
        if only is not None and name not in only:
            continue
        out["lists"][name] = {str(n): round(time_call(make(n), a.calls, a.rounds, sync), 1) for n in LENGTHS}
    out["optimizers"] = {}
    for name, make in optimizer_steps(device).items():
        if only is not None and name not in only:
            continue
        out["optimizers"][name] = {str(n): round(time_call(make(n), 5, a.rounds, sync), 1) for n in OPTIMIZER_LENGTHS}
    for name, fn in single_ops(device).items():
        out["single"][name] = round(time_call(fn, a.calls * 5, a.rounds, sync), 1)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out["lists"].get("_foreach_sqrt")), out["single"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
