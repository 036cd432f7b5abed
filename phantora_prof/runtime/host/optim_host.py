"""Host time of torch.optim's per-parameter work, which no captured op stands for.

(With the interpreter's work counted (runtime/host/pyhost.py) the Python share of these
measurements is counted twice, ~15% of them; they stay because most of a parameter's cost
here is C-level work the instruction count does not see: `p.grad = None` runs the tensor's
grad setter, the state lookups hash tensors.)

An optimizer step spends host time per parameter outside the aten ops it calls: a fused
AdamW step's `_init_group` walks every parameter (grad checks, state lookups, list building)
before the single fused launch, and `zero_grad(set_to_none=True)` loops over the parameters
in Python. Captured ops are charged by hostcost's per-op table; these per-parameter costs
are charged here on top (measured on the H200 with tools/holdout/loop.py --host-probe,
hostcost.OPTIMIZER_PYTHON_NS), and what whole steps of the foreach and fused implementations
cost per parameter beyond their ops and counted Python (measure/host_lists.py,
hostcost.optimizer_step_ns): a foreach AdamW step ~21 us per parameter on the H200 host, of
which ~12 us is neither (per-parameter Python in C calls: step counters read with .item(),
scalar lists built and parsed).
"""
from __future__ import annotations

import functools
import logging

import torch

from phantora_prof import hostcost
from phantora_prof.runtime.process import state as _state

log = logging.getLogger(__name__)


def _params_with_grad(group: dict) -> int:
    return sum(1 for p in group.get("params", ()) if getattr(p, "grad", None) is not None)


def _charge(ns: int) -> None:
    if ns > 0:
        _state.get().clock.advance(ns)


def implementation(group: dict) -> str:
    """Which of torch.optim's implementations a parameter group's step takes: "fused",
    "foreach" (also the default, foreach=None, for CUDA parameters) or "forloop"."""
    if group.get("fused"):
        return "fused"
    foreach = group.get("foreach")
    if foreach is None:
        first = next(iter(group.get("params", ())), None)
        foreach = first is not None and first.device.type == "cuda"
    return "foreach" if foreach else "forloop"


def _step_pre_hook(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    fused_python = hostcost.OPTIMIZER_PYTHON_NS.get("fused_step_per_param", 0)
    classes = [c.__name__ for c in type(optimizer).__mro__]
    ns = 0
    for g in optimizer.param_groups:
        impl = implementation(g)
        n = _params_with_grad(g)
        ns += n * hostcost.optimizer_step_ns(impl, classes)
        if impl == "fused":
            ns += n * fused_python
    _charge(ns)


def _patched_zero_grad(orig):
    @functools.wraps(orig)
    def zero_grad(self, set_to_none: bool = True):
        per_param = hostcost.OPTIMIZER_PYTHON_NS.get("zero_grad_per_param", 0)
        _charge(per_param * sum(len(g.get("params", ())) for g in self.param_groups))
        return orig(self, set_to_none)

    return zero_grad


def install() -> None:
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(_step_pre_hook)
    torch.optim.Optimizer.zero_grad = _patched_zero_grad(torch.optim.Optimizer.zero_grad)
