"""`phantora-prof accelerate launch [OPTIONS] SCRIPT [ARGS]`: what HF Accelerate's launcher would
start, started on simulated GPUs.

Accelerate's own code reads the command line and its config file (`--config_file`, else the
default one `accelerate config` wrote) and decides the launch: one process (its "simple"
launcher) or torchrun's N processes per node (multi-GPU, FSDP, Megatron-LM and single-node
DeepSpeed), and the environment the script sees (ACCELERATE_MIXED_PRECISION,
ACCELERATE_USE_FSDP, FSDP_*, ACCELERATE_DEEPSPEED_*, ...). Here the same code runs with its
launchers replaced by ones that keep what they would have started, so every option and config
key means what it means to Accelerate; the simulated cluster is then `--num_machines` nodes of
`--num_processes / --num_machines` GPUs, the script runs as under torchrun (Accelerate's
multi-process launchers are torchrun), and the variables torchrun itself sets (RANK,
MASTER_ADDR, ...) come from phantora-prof as for `phantora-prof torchrun`.

Needs the accelerate package (not a dependency). TPU, SageMaker and multi-node DeepSpeed
launches (pdsh, mpirun) are refused with a clear error.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from phantora_prof.errors import ConfigError

# set by the launch itself (torchrun's rendezvous), which phantora-prof provides per rank
_LAUNCHER_OWNED = frozenset(("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                             "NODE_RANK", "GROUP_RANK"))


@dataclass(frozen=True)
class AccelerateLaunch:
    """What `accelerate launch` would start: `nproc_per_node` x `nnodes` processes (torchrun) or
    one (`distributed` False), each running `command` with `env` added."""

    nproc_per_node: int
    nnodes: int
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    distributed: bool


class _Captured(Exception):
    def __init__(self, launch: AccelerateLaunch) -> None:
        super().__init__("captured")
        self.launch = launch


def accelerate_command(command: list[str]) -> AccelerateLaunch:
    """`accelerate launch ...` (command[0] is `accelerate`) -> the launch it would make. Raises
    ConfigError for what cannot be simulated; `accelerate launch --help` prints Accelerate's help
    and raises SystemExit, as Accelerate does."""
    if len(command) < 2 or command[1] != "launch":
        raise ConfigError("phantora-prof runs `accelerate launch [OPTIONS] SCRIPT ...`; "
                          f"`accelerate {' '.join(command[1:2])}` is not a launch")
    try:
        from accelerate.commands import launch as launch_mod
        from accelerate.utils import launch as launch_utils
    except ImportError as exc:
        raise ConfigError(f"`accelerate launch` needs the accelerate package ({exc}): pip install accelerate") from None

    parser = launch_mod.launch_command_parser()
    args = parser.parse_args(command[2:])
    if getattr(args, "machine_rank", None) is None:
        args.machine_rank = 0  # one command simulates every machine; the launch is that of machine 0
    before = dict(os.environ)

    def script_command(a) -> tuple[str, ...]:
        if a.no_python:
            raise ConfigError("accelerate launch --no_python: phantora-prof runs Python scripts only")
        head = [sys.executable, "-m"] if a.module else [sys.executable]
        return tuple(head + [a.training_script, *a.training_script_args])

    def added(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in env.items() if before.get(k) != v and k not in _LAUNCHER_OWNED))

    def simple(a) -> None:
        _cmd, env = launch_utils.prepare_simple_launcher_cmd_env(a)
        if a.mpirun_hostfile is not None:
            raise ConfigError("accelerate launch --mpirun_hostfile (CPU training over MPI) is not simulated")
        raise _Captured(AccelerateLaunch(1, 1, script_command(a), added(env), False))

    def torchrun_like(a, env: dict[str, str]) -> None:
        machines = max(1, int(a.num_machines or 1))
        total = int(a.num_processes or 1)
        if total % machines:
            raise ConfigError(f"accelerate launch: --num_processes {total} is not a multiple of "
                              f"--num_machines {machines}")
        raise _Captured(AccelerateLaunch(total // machines, machines, script_command(a), added(env), True))

    def multi_gpu(a) -> None:
        torchrun_like(a, launch_utils.prepare_multi_gpu_env(a))

    def deepspeed(a) -> None:
        cmd, env = launch_utils.prepare_deepspeed_cmd_env(a)
        if cmd is not None and cmd[0] == "deepspeed":
            raise ConfigError("accelerate launch with DeepSpeed over several machines (pdsh / ssh launchers) "
                              "is not simulated; give --deepspeed_multinode_launcher standard")
        torchrun_like(a, env)

    def refused(what: str):
        def launcher(*_a, **_k) -> None:
            raise ConfigError(f"accelerate launch on {what} is not simulated (phantora-prof simulates NVIDIA GPUs)")
        return launcher

    replaced = {"simple_launcher": simple, "multi_gpu_launcher": multi_gpu, "deepspeed_launcher": deepspeed,
                "tpu_launcher": refused("TPUs"), "tpu_pod_launcher": refused("TPU pods"),
                "sagemaker_launcher": refused("SageMaker")}
    saved = {name: getattr(launch_mod, name) for name in replaced if hasattr(launch_mod, name)}
    try:
        for name, fn in replaced.items():
            setattr(launch_mod, name, fn)
        launch_mod.launch_command(args)
    except _Captured as done:
        return done.launch
    except (ValueError, TypeError, AssertionError, ConnectionError) as exc:  # Accelerate's own checks of the options
        raise ConfigError(f"accelerate launch: {exc}") from None
    finally:
        for name, fn in saved.items():
            setattr(launch_mod, name, fn)
        os.environ.clear()
        os.environ.update(before)
    raise ConfigError("accelerate launch started nothing phantora-prof can simulate")
