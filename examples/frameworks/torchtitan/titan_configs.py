"""torchtitan configs for the phantora-prof examples: torchtitan's own llama3 configs, unchanged.

torchtitan picks its config with `--module M --config F`, importing module `M` (or
`M.config_registry`) and calling `F()`. This module re-exports the config functions of
`torchtitan.models.llama3.config_registry` (so `--module titan_configs --config
llama3_debugmodel` is exactly torchtitan's debug model), and fills one gap between
torchtitan 0.3.0 and torch 2.13.0, which a real GPU run with these versions needs too:

- torchtitan 0.3.0 calls `torch.distributed.set_timeout(timeout, group)` after the first
  step (`set_pg_timeouts`); torch 2.13.0 has that function only as
  `torch.distributed.distributed_c10d._set_pg_timeout`. It is aliased when missing.
- torchtitan 0.3.0 runs pipeline parallelism with `schedule.step(arg_mbs=, kwarg_mbs=,
  target_mbs=, ...)` (microbatches it split itself); torch 2.13.0's schedules take only the
  whole batch. `pp_compat.install()` lets them take the pre-split microbatches too (see
  pp_compat.py).
"""
from __future__ import annotations

import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

from torchtitan.models.llama3.config_registry import *  # noqa: F401,F403 - the config functions

import pp_compat  # noqa: E402 - next to this module (torchtitan.sh puts the folder on PYTHONPATH)

if not hasattr(dist, "set_timeout") and hasattr(_c10d, "_set_pg_timeout"):
    dist.set_timeout = _c10d._set_pg_timeout  # type: ignore[attr-defined]

pp_compat.install()


def llama3_70b():
    """torchtitan's Llama 3 70B model (its registry's "70B") with the training settings of its
    own llama3_8b config: torchtitan 0.3.0 registers the model but ships no config function
    for it (used for the 16,384-rank 3-D runs of README's "Large clusters")."""
    from torchtitan.models.llama3 import model_registry

    config = llama3_8b()  # noqa: F405 - from torchtitan's config registry above
    config.model_spec = model_registry("70B")
    return config


def llama3_8b_float8():
    """torchtitan's llama3_8b with its Float8 converter (torchao; torchtitan 0.3.0 offers the
    rowwise recipes only) and the model compiled, which Float8 needs to be fast: the third rung
    of torchtitan's published ladder (eager, compile, compile + Float8; README "torch.compile").
    torchtitan 0.3.0 ships this for the debug model only (llama3_debugmodel_float8)."""
    from torchtitan.components.quantization import Float8LinearConverter
    from torchtitan.config import CompileConfig
    from torchtitan.models.llama3 import model_registry

    config = llama3_8b()  # noqa: F405 - from torchtitan's config registry above
    config.compile = CompileConfig(enable=True, components=["model"])
    config.model_spec = model_registry("8B", converters=[Float8LinearConverter.Config(model_compile_enabled=True)])
    return config


def _llama3_8b_layers(n_layers: int):
    """torchtitan's llama3_8b cut to its first `n_layers` decoder layers (embedding, norm and the
    128k output layer kept): a slice of the 8B model that one GPU holds, to compare a simulated
    1-GPU run of torchtitan's own model code with a real one."""
    config = llama3_8b()  # noqa: F405 - from torchtitan's config registry above
    config.model_spec.model.layers = config.model_spec.model.layers[:n_layers]
    return config


def llama3_8b_4layers():
    """Llama 3.1 8B's first 4 layers (see _llama3_8b_layers)."""
    return _llama3_8b_layers(4)


def llama3_8b_8layers():
    """Llama 3.1 8B's first 8 layers (see _llama3_8b_layers)."""
    return _llama3_8b_layers(8)
