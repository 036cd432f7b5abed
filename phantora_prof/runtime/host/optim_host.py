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
hostcost.OPTIMIZER_PYTHON_NS). The foreach and for-loop implementations are covered by
their ops' costs only (no unblocked measurement of their extra Python yet).
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


def _step_pre_hook(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    per_param = hostcost.OPTIMIZER_PYTHON_NS.get("fused_step_per_param", 0)
    n = sum(_params_with_grad(g) for g in optimizer.param_groups if g.get("fused"))
    _charge(n * per_param)


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
