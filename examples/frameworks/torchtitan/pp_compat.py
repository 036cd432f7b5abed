"""Pre-split microbatch inputs for torch 2.13's pipeline schedules, as torchtitan 0.3.0 calls them.

torchtitan 0.3.0 (`Trainer.pp_forward_backward_step`, `Validator.validate`) builds the
microbatches itself and calls

    schedule.step(arg_mbs=[(inputs,), ...] | None, kwarg_mbs=[{...}, ...],
                  target_mbs=[labels, ...] | None, losses=[...], loss_kwargs={...},
                  return_outputs=False)

(and `schedule.eval(...)` with the same keywords), an API of torch releases newer than
2.13.0. torch 2.13.0's `PipelineScheduleSingle.step` / `PipelineScheduleMulti.step` take
only the *whole batch* (`step(*args, target=, losses=, return_outputs=, loss_kwargs=,
**kwargs)`): the unknown keywords land in the model kwargs and are split into
`n_microbatches` chunks, so torch raises "Expecting 8 arg_mbs but got 1". This happens on a
real GPU with these two versions too.

The adapter keeps torch 2.13's own `step` (its grad-mode check, `has_backward` propagation,
per-iteration `clear_runtime_states`, output merging) and changes only where the
microbatches come from: when the pre-split lists are given, the step runs with an empty
whole batch (nothing to split) and its `_step_microbatches` call receives the caller's
lists instead of the empty split. `_step_microbatches(arg_mbs, kwarg_mbs, target_mbs,
losses, return_outputs, loss_kwargs=)` is the schedule-independent entry point every torch
2.13 schedule implements (and checks with `_check_inputs`: one entry per microbatch), so
every schedule (1F1B, GPipe, Interleaved1F1B, ZeroBubble, ...) runs the caller's
microbatches in full. `eval` needs no change: torch 2.13's `eval` forwards its keywords to
`step`. The patch is applied only when `step` lacks the `arg_mbs` keyword, so a torch that
has the API natively is left alone.
"""
from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable

from torch.distributed.pipelining import schedules as _schedules

logger = logging.getLogger(__name__)

_MICROBATCH_KEYWORDS = ("arg_mbs", "kwarg_mbs", "target_mbs")


def _wrap_step(step: Callable[..., Any]) -> Callable[..., Any]:
    """`step` that also accepts already-split microbatches (`arg_mbs`/`kwarg_mbs`/`target_mbs`)."""

    @functools.wraps(step)
    def step_with_microbatches(self, *args: Any, target: Any = None, losses: list | None = None,
                               return_outputs: bool = True, loss_kwargs: dict[str, Any] | None = None,
                               arg_mbs: list | None = None, kwarg_mbs: list | None = None,
                               target_mbs: list | None = None, **kwargs: Any) -> Any:
        if arg_mbs is None and kwarg_mbs is None and target_mbs is None:
            return step(self, *args, target=target, losses=losses, return_outputs=return_outputs,
                        loss_kwargs=loss_kwargs, **kwargs)
        if args or kwargs or target is not None:
            raise TypeError("schedule.step(): pass either the whole batch (*args, target=, **kwargs) "
                            "or pre-split microbatches (arg_mbs=, kwarg_mbs=, target_mbs=), not both")
        run_microbatches = self._step_microbatches  # the schedule's own (bound) implementation

        def _pre_split(_args_split: list, _kwargs_split: list, _targets_split: list | None,
                       step_losses: list | None, step_return_outputs: bool = True,
                       loss_kwargs: dict[str, Any] | None = None) -> Any:
            # torch's step split an empty whole batch: use the caller's microbatches instead
            return run_microbatches(arg_mbs, kwarg_mbs, target_mbs, step_losses, step_return_outputs,
                                    loss_kwargs=loss_kwargs)

        self._step_microbatches = _pre_split  # instance attribute, shadows the method for this call
        try:
            return step(self, target=None, losses=losses, return_outputs=return_outputs,
                        loss_kwargs=loss_kwargs)
        finally:
            del self._step_microbatches

    step_with_microbatches.__phantora_pp_compat__ = True  # type: ignore[attr-defined]
    return step_with_microbatches


def install() -> list[str]:
    """Patch the `step` of torch's schedule base classes when it lacks `arg_mbs`; returns the patched names."""
    patched = []
    for cls in (_schedules.PipelineScheduleSingle, _schedules.PipelineScheduleMulti):
        step = cls.__dict__.get("step")
        if step is None or getattr(step, "__phantora_pp_compat__", False):
            continue
        if "arg_mbs" in inspect.signature(step).parameters:
            continue  # this torch has the microbatch API itself
        cls.step = _wrap_step(step)
        patched.append(cls.__name__)
    if patched:
        logger.debug("pipeline schedules accept pre-split microbatches: %s", ", ".join(patched))
    return patched
