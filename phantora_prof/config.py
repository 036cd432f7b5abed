"""The run configuration: every option of a simulated run, validated once, as one tree.

The CLI's options (`cli.py`) and the `phantora-prof db build` command build a `RunConfig`;
the launcher starts the coordinator and the ranks from it and hands each rank its part of it
(`protocol.RankConfig`). Each part checks itself when it is made, so a bad option is a clear
`ConfigError` before anything runs, and resolves what depends on other options (the
network a GPU comes in, where a measured kernel database is kept, absolute paths).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from phantora_prof.errors import ConfigError

KERNEL_TIME_MODES = ("model", "measure")


@dataclass(frozen=True)
class ClusterConfig:
    """The simulated machines: GPU model, nodes, GPUs (ranks) per node, and their network."""

    gpu: str = "h200"
    nnodes: int = 1
    nproc_per_node: int = 1
    # GPUs each node has, which every rank process sees (torchrun's view); None: one per process.
    # More than the processes: a single-process script that drives several GPUs (nn.DataParallel)
    gpus_per_node: int | None = None
    # a netsim preset or a TOML cluster file; None: the GPU's own DGX (an error for a GPU without one)
    network: str | None = None
    # which ranks run a live process (engine/representatives.py): auto, all, representative
    live_ranks: str = "auto"
    # ranks that run live (and write traces) under representative ranks, with their pipeline peers
    trace_ranks: tuple[int, ...] = ()
    # under representative ranks, a second live set checks that each class runs one program
    class_check: bool = True

    def __post_init__(self) -> None:
        from phantora_prof.cost import get_gpu
        from phantora_prof.engine.collectives import check_cluster, default_cluster

        if self.nproc_per_node < 1:
            raise ConfigError("--nproc-per-node must be at least 1")
        if self.nnodes < 1:
            raise ConfigError("--nnodes must be at least 1")
        if self.gpus_per_node is not None and self.gpus_per_node < self.nproc_per_node:
            raise ConfigError(f"--gpus-per-node {self.gpus_per_node} is fewer than --nproc-per-node "
                              f"{self.nproc_per_node}: each rank process needs a GPU of its own")
        from phantora_prof.engine.representatives import representative_mode

        representative_mode(self.live_ranks, self.world_size)  # validates the choice
        bad = [r for r in self.trace_ranks if not 0 <= r < self.world_size]
        if bad:
            raise ConfigError(f"--trace-ranks {','.join(map(str, bad))}: the run has ranks 0 to "
                              f"{self.world_size - 1} (--nnodes x --nproc-per-node)")
        spec = get_gpu(self.gpu)  # validates the name
        network = check_cluster(self.network, spec) if self.network else default_cluster(spec.key)
        object.__setattr__(self, "network", network)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def node_gpus(self) -> int:
        """The GPUs of a node, all visible to each of its rank processes."""
        return self.gpus_per_node or self.nproc_per_node

    @property
    def representative(self) -> bool:
        """Whether some ranks are mirrored rather than simulated (`--live-ranks`)."""
        from phantora_prof.engine.representatives import representative_mode

        return representative_mode(self.live_ranks, self.world_size)


@dataclass(frozen=True)
class KernelTimesConfig:
    """Where kernel durations come from: the built-in models, or this machine's GPU (`measure`),
    a kernel database consulted first, and `--op-cost` overrides (op name -> ns)."""

    mode: str = "model"
    db: Path | None = None
    op_costs: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in KERNEL_TIME_MODES:
            raise ConfigError(f"--kernel-times must be 'model' or 'measure', not {self.mode!r}")
        if self.db is not None:
            object.__setattr__(self, "db", Path(self.db).expanduser().resolve())
        if self.mode == "model" and self.db is not None:
            from phantora_prof.cost.kernel_db import KernelDB

            KernelDB.load(self.db)  # a clear error now rather than one per rank
        object.__setattr__(self, "op_costs", dict(self.op_costs))


@dataclass(frozen=True)
class HostConfig:
    """The simulated host (CPU): its speed profile, and whether the script's Python is counted."""

    profile: str = "h200"  # a built-in profile name or a profile file (hostcost.load_profile)
    count_python: bool = True  # charge the interpreter's work between ops (runtime/host/pyhost.py)

    def __post_init__(self) -> None:
        from phantora_prof import hostcost

        hostcost.load_profile(self.profile)  # a clear error now rather than one per rank
        if os.sep in self.profile or self.profile.endswith(".json"):
            object.__setattr__(self, "profile", str(Path(self.profile).expanduser().resolve()))


@dataclass(frozen=True)
class OutputConfig:
    """What the run writes: per-rank traces (and in which format), a report, a summary file."""

    out_dir: Path = Path("phantora_traces")
    trace: bool = True
    trace_format: str = "both"  # kineto | perfetto | both
    report_dir: Path | None = None
    summary_json: Path | None = None

    def __post_init__(self) -> None:
        from phantora_prof.outputs import TRACE_FORMATS

        if self.trace_format not in TRACE_FORMATS:
            raise ConfigError(f"--format must be one of {', '.join(TRACE_FORMATS)}, not {self.trace_format!r}")


@dataclass(frozen=True)
class RunConfig:
    """One simulated run: the user's command and everything about how it is simulated."""

    command: tuple[str, ...]
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    kernel_times: KernelTimesConfig = field(default_factory=KernelTimesConfig)
    host: HostConfig = field(default_factory=HostConfig)
    outputs: OutputConfig = field(default_factory=OutputConfig)
    collective_timeout_s: float = 300.0
    log_level: str = "warning"
    # the command was `torchrun ...`: its ranks get torchrun's environment even when there is one
    # (launcher.torchrun_env says when a run's ranks get it)
    torchrun: bool = False
    # environment the launch adds for the ranks (`accelerate launch` sets ACCELERATE_* variables)
    env: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "env", tuple((str(k), str(v)) for k, v in dict(self.env).items()))
        if not self.command:
            raise ConfigError("no command given: try `phantora-prof python train.py`")
        if self.collective_timeout_s <= 0:
            raise ConfigError("--collective-timeout must be positive")
        if self.kernel_times.mode == "measure" and self.kernel_times.db is None:
            # measured kernels are kept per simulated GPU model in the user's cache
            kt = dataclasses.replace(self.kernel_times, db=default_kernel_db(self.cluster.gpu))
            object.__setattr__(self, "kernel_times", kt)

    def with_changes(self, **changes: dict) -> "RunConfig":
        """A copy with some fields of its parts changed, validated again:
        `cfg.with_changes(kernel_times={"mode": "measure"}, outputs={"trace": False})`."""
        parts = {name: dataclasses.replace(getattr(self, name), **values) for name, values in changes.items()}
        return dataclasses.replace(self, **parts)


def default_kernel_db(gpu: str) -> Path:
    """Where --kernel-times measure keeps what it measured, per simulated GPU model."""
    from phantora_prof.cache_paths import cache_base

    return cache_base() / f"kernels-{gpu}.json.gz"
