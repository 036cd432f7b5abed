"""Start the coordinator and the rank processes for one simulated run, and write the results.

A rank process is `python -m phantora_prof.runtime.bootstrap <the user's command>` with the
environment torchrun would give it plus our own (coordinator address, rank config). The
user's stdout/stderr are inherited untouched; the CLI exits with the script's exit code.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from phantora_prof.cost import get_gpu
from phantora_prof.engine.coordinator import Coordinator
from phantora_prof.engine.rank_timeline import RankTimeline
from phantora_prof.errors import ConfigError
from phantora_prof.runtime.clock import ORIGIN_NS
from phantora_prof.runtime.state import RankConfig
from tracing.kineto import write_kineto

log = logging.getLogger(__name__)

PYTHON_NAMES = ("python", "python3")


@dataclass
class RunOptions:
    command: list[str]
    gpu: str = "h200"
    out_dir: Path = Path("phantora_traces")
    nproc_per_node: int = 1
    trace: bool = True
    log_level: str = "warning"
    op_costs: dict[str, int] = field(default_factory=dict)  # op name -> ns

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError("no command given: try `phantora-prof python train.py`")
        if self.nproc_per_node < 1:
            raise ConfigError("--nproc-per-node must be at least 1")
        if self.nproc_per_node > 1:
            raise ConfigError("simulating several ranks (--nproc-per-node > 1) is not available yet: "
                              "this version simulates one GPU")
        get_gpu(self.gpu)  # validates the name


@dataclass
class RankSummary:
    rank: int
    exit_code: int | None
    sim_time_ns: int
    gpu_busy_ns: int
    ops: int
    kernels: int
    memcpys: int
    memsets: int
    trace_path: Path | None
    kernel_sources: dict[str, int] = field(default_factory=dict)


@dataclass
class RunResult:
    exit_code: int
    ranks: list[RankSummary]
    wall_s: float


_UNITS_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_op_cost(spec: str) -> tuple[str, int]:
    """`aten::foo=35us` -> ("aten::foo", 35000). Units: ns, us, ms, s (default us)."""
    name, sep, value = spec.partition("=")
    name, value = name.strip(), value.strip().lower()
    if not sep or not name or not value:
        raise ConfigError(f"--op-cost expects NAME=TIME (e.g. mylib::rope=35us), got {spec!r}")
    if "::" not in name:
        name = f"aten::{name}"
    unit = next((u for u in ("ns", "us", "ms", "s") if value.endswith(u)), "")
    number = value[: len(value) - len(unit)] if unit else value
    try:
        ns = int(round(float(number) * _UNITS_NS[unit or "us"]))
    except ValueError:
        raise ConfigError(f"--op-cost {spec!r}: {number!r} is not a number") from None
    if ns <= 0:
        raise ConfigError(f"--op-cost {spec!r}: the time must be positive")
    return name, ns


def python_argv(command: list[str]) -> list[str]:
    """The part of `python [args] ...` that the rank bootstrap runs (script/-m/-c and its args)."""
    exe = os.path.basename(command[0])
    if not (exe in PYTHON_NAMES or exe.startswith("python3.") or os.path.abspath(command[0]) == sys.executable):
        raise ConfigError(
            f"phantora-prof runs Python training scripts: expected `python SCRIPT ...`, "
            f"`python -m MODULE ...` or `python -c CODE`, got `{command[0]}`")
    rest = list(command[1:])
    # python's own flags that make sense here are accepted and ignored (-u) or rejected
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        flag = rest.pop(0)
        if flag not in ("-u", "-B", "-O", "-OO"):
            raise ConfigError(f"unsupported python option {flag!r} before the script")
    if not rest:
        raise ConfigError("`python` needs a script, -m MODULE or -c CODE")
    if rest[0] not in ("-m", "-c") and not os.path.exists(rest[0]):
        raise ConfigError(f"can't open file {rest[0]!r}: no such file")
    return rest


def run(opts: RunOptions, on_progress=None) -> RunResult:
    argv = python_argv(opts.command)
    gpu = get_gpu(opts.gpu)
    world = opts.nproc_per_node
    epoch_ns = time.time_ns()
    t0 = time.monotonic()
    sock_dir = tempfile.mkdtemp(prefix="phantora-")
    base_env = dict(os.environ)
    base_env.pop("PHANTORA_RANK_CONFIG", None)

    def timeline(rank: int) -> RankTimeline:
        props = [gpu.device_properties(i) for i in range(opts.nproc_per_node)]
        return RankTimeline(rank, host_pid=100 + rank, device_properties=props, num_sms=gpu.num_sms,
                            base_time_ns=epoch_ns - ORIGIN_NS)

    coord = Coordinator(world, sock_dir, timeline)
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(world):
            cfg = RankConfig(rank=rank, world_size=world, local_rank=rank, device_count=opts.nproc_per_node,
                             gpu=gpu.key, op_costs=opts.op_costs)
            env = dict(base_env)
            env.update({
                "PHANTORA_COORDINATOR": coord.address,
                "PHANTORA_RANK_CONFIG": cfg.to_env(),
                "PHANTORA_EPOCH_NS": str(epoch_ns),
                "PHANTORA_LOG_LEVEL": opts.log_level,
                "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": env.get("MASTER_PORT", "29500"),
                "TORCHELASTIC_RUN_ID": uuid.uuid4().hex[:8],
            })
            cmd = [sys.executable, "-m", "phantora_prof.runtime.bootstrap", *argv]
            procs.append(subprocess.Popen(cmd, env=env))
        try:
            coord.serve(procs, on_progress=on_progress)
        except KeyboardInterrupt:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            raise
        codes = [p.wait() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(sock_dir, ignore_errors=True)

    summaries = []
    if opts.trace:
        opts.out_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(world):
        res = coord.ranks.get(rank)
        if res is None:
            summaries.append(RankSummary(rank, codes[rank], 0, 0, 0, 0, 0, 0, None))
            continue
        tl = res.timeline
        path = None
        if opts.trace:
            trace = tl.finish(base_time_ns=epoch_ns - ORIGIN_NS, trace_name=f"rank{rank}")
            path = write_kineto(trace, opts.out_dir / f"rank{rank}.pt.trace.json.gz")
        end = tl.stats.host_end_ns
        summaries.append(RankSummary(
            rank, codes[rank], max(0, end - ORIGIN_NS), tl.gpu_busy_ns(), tl.stats.ops, tl.stats.kernels,
            tl.stats.memcpys, tl.stats.memsets, path, dict(tl.stats.estimated_ops)))
    exit_code = next((c for c in codes if c != 0), 0)
    return RunResult(exit_code, summaries, time.monotonic() - t0)
