"""The rank's one kernel-time model, built once from the run configuration.

A CostModel holds what decides a captured op's GPU work for this run: the simulated GPU,
the user's kernel database (`--kernel-db` / `--kernel-times measure`: consulted first), the
`--op-cost` overrides, and which built-in sources are on (the exact-shape table, the
isolated-op curves, the family curves, then the roofline; cost/__init__.py says in which
order and why). The runtime builds it in `runtime/process/install.py` and hands it to the capture
mode; nothing in `cost/` is configured through module globals.

The TF32 policy is not fixed here: a script may flip `torch.backends.cuda.matmul.allow_tf32`
between ops, so the capture mode passes it per call.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phantora_prof.cost import cache_lookup, cache_store, estimate_uncached, materialize
from phantora_prof.cost.gpus import GpuSpec, get_gpu
from phantora_prof.cost.kernels import KIND_KERNEL, Kernel
from phantora_prof.cost.profiles import profile_for
from phantora_prof.protocol import OpCall, OpKind


class CostModel:
    """Kernels for captured ops on one simulated GPU (see the module docstring)."""

    def __init__(self, gpu: GpuSpec | str, source: Any = None, op_costs: Mapping[str, int] | None = None,
                 use_table: bool = True, use_measured: bool | None = None, use_family: bool | None = None):
        self.gpu = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
        # read now, at rank start-up: the first captured op must not pay for parsing it
        self.profile = profile_for(self.gpu)
        self.source = source  # measure/source.py: DatabaseSource or MeasuringSource, or None
        self.op_costs = dict(op_costs or {})
        for name, ns in self.op_costs.items():
            if not isinstance(ns, int) or ns < 0:
                from phantora_prof.errors import ConfigError

                raise ConfigError(f"--op-cost {name}: the time must be a non-negative integer of ns, not {ns!r}")
        self.use_table = use_table
        self.use_measured = use_table if use_measured is None else use_measured
        self.use_family = self.use_measured if use_family is None else use_family
        self._cache: dict = {}

    def load_tables(self) -> None:
        """Load now the models derived from the shipped tables that this run's sources use (from
        the derived-model cache when this machine has them: ~50 ms), instead of at the first op
        that needs each. A rank calls this before it freezes its start-up objects out of the
        cyclic collector: loaded later, the tables' ~100k objects were walked by every full
        collection, and where such collections fell decided per-step work (one more gen-2 pass
        in 4 steps of a small GPT: +5.9% instructions per step under callgrind)."""
        from phantora_prof.cost import families, measured, split_k

        if self.use_measured:
            measured.model()
        if self.use_family:
            for gpu_key in families.measured_gpus():
                families.model(gpu_key)
        split_k.preload()

    def has_user_cost(self, op_name: str) -> bool:
        return op_name in self.op_costs

    def estimate(self, op: OpCall, allow_tf32: bool = False) -> tuple[Kernel, ...]:
        """The GPU activities `op` launches, in launch order (empty when none)."""
        user_ns = self.op_costs.get(op.name)
        if user_ns is not None:
            return (Kernel(KIND_KERNEL, op.name, user_ns, grid=(self.gpu.num_sms, 1, 1), block=(256, 1, 1),
                           source="user"),)
        if op.kind == OpKind.HOST:
            return ()
        key, hit = cache_lookup(self._cache, op, (allow_tf32,))
        if hit is not None:
            return hit
        res = tuple(estimate_uncached(op, self.gpu, allow_tf32, self.use_table, self.use_measured, self.use_family,
                                      self.source))
        cache_store(self._cache, key, res)
        return res

    def kernels_from(self, cost: Any, specs: list, total_ns: float) -> list[Kernel]:
        """Kernels for work the caller costed itself (a higher-order op's template kernel):
        `total_ns` shared among `specs` as the built-in sources do."""
        return materialize(cost, specs, total_ns, self.gpu)

    def close(self) -> None:
        """A measuring source merges what it measured into its database file."""
        if self.source is not None:
            self.source.close()
