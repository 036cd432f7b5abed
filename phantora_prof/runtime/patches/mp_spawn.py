"""`torch.multiprocessing.spawn(fn, args, nprocs=N)`: each simulated rank runs `fn(i, *args)`.

Scripts that start their own ranks (`mp.spawn(main, args=(world,), nprocs=world)`, the pattern
of torch's DDP tutorial) do not go through torchrun: the parent process starts N children with
the `spawn` start method, and each child calls `fn(i, *args)`. Under the simulator the children
would be plain Python processes without the simulated GPU ("Distributed package doesn't have
NCCL built in"). Instead:

- when the simulated node already has N ranks (`phantora-prof --nproc-per-node N python
  script.py`, or the relaunch below), every rank runs the script as it would run the parent,
  and its `mp.spawn` calls `fn(LOCAL_RANK, *args)` in the rank itself. Then the ranks other
  than 0 end, as a child process does, and rank 0 goes on as the parent after
  `spawn(join=True)` once every rank has returned from fn (in simulated time too);
- when the script runs as one rank (the default) and asks for N > 1 processes, the rank tells
  the CLI how many (a file named by `PHANTORA_SPAWN_REQUEST`) and ends; the CLI runs the
  script again as N ranks (launcher.py). What the parent printed before its `mp.spawn` was
  shown by that first run, so the relaunched ranks' output up to their `mp.spawn` is dropped
  (`PHANTORA_SPAWN_QUIET`): the output reads as one parent and N children. If a relaunched
  rank ends before reaching `mp.spawn`, what it wrote is replayed so no error is lost.

Approximate: the parent's work before `mp.spawn` runs once per rank on the simulated timeline
(it is the script's set-up: argument parsing, imports), and starting the child processes
costs no simulated time. `join=False` runs `fn` at once and returns a context whose `join()`
is done.
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile
from typing import Any, Callable

from phantora_prof.protocol import SPAWN_QUIET_ENV as QUIET_ENV
from phantora_prof.protocol import SPAWN_REQUEST_ENV as REQUEST_ENV

log = logging.getLogger(__name__)

EXIT_CODE = 0  # the probing rank ends normally once it has asked for a relaunch


class _QuietUntilSpawn:
    """File descriptors 1 and 2 go to a temporary file until `release()`; `replay()` writes what
    was held back to the real streams (the rank ended before its mp.spawn)."""

    def __init__(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self._held = tempfile.TemporaryFile()
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(self._held.fileno(), 1)
        os.dup2(self._held.fileno(), 2)
        self.active = True

    def release(self, replay: bool = False) -> None:
        if not self.active:
            return
        self.active = False
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        os.close(self._saved[0])
        os.close(self._saved[1])
        if replay:
            self._held.seek(0)
            data = self._held.read()
            if data:
                os.write(2, data)
        self._held.close()


_quiet: _QuietUntilSpawn | None = None


class _DoneContext:
    """What `spawn(join=False)` returns: the processes' work is already done."""

    def __init__(self) -> None:
        self.processes: list[Any] = []

    def pids(self) -> list[int]:
        return [os.getpid()]

    def join(self, timeout: float | None = None, grace_period: float | None = None) -> bool:
        return True


def _local_world() -> tuple[int, int]:
    return int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def _start_processes(fn: Callable, args: tuple = (), nprocs: int = 1, join: bool = True,
                     daemon: bool = False, start_method: str = "spawn") -> Any:
    nprocs = int(nprocs)
    local_rank, local_world = _local_world()
    if nprocs > 1 and local_world == 1 and os.environ.get(REQUEST_ENV):
        _request_relaunch(nprocs)  # does not return
    if nprocs == local_world:
        index = local_rank
    elif nprocs == 1:
        index = 0
    else:
        raise RuntimeError(
            f"torch.multiprocessing.spawn(nprocs={nprocs}) in a simulated node of {local_world} GPU rank(s): "
            f"run the script with phantora-prof --nproc-per-node {nprocs} (each simulated rank then runs "
            f"fn(rank, ...)), or as one rank and let phantora-prof start {nprocs}")
    if _quiet is not None:
        _quiet.release()
    log.debug("mp.spawn: rank %s runs %s(%d, ...) in process", os.environ.get("RANK"), getattr(fn, "__name__", fn),
              index)
    fn(index, *args)
    sys.stdout.flush()
    if nprocs > 1:
        _join_children(local_rank, local_world)
    if index != 0:
        raise SystemExit(0)  # a child process ends when fn returns
    return None if join else _DoneContext()  # rank 0 goes on as the parent


def _join_children(local_rank: int, local_world: int) -> None:
    """The parent's `join`: every rank of the node waits until all have returned from fn
    (a host exchange through the coordinator, in a group of the simulator's own), so rank 0
    goes on as the parent at the simulated time the last child ended, and after their output."""
    from phantora_prof.protocol import INTERNAL_GROUP_PREFIX, GroupCreated
    from phantora_prof.runtime.distributed.host_collectives import HostGroup
    from phantora_prof.runtime.process import state as _state

    st = _state.get()
    rank = st.config.rank
    first = rank - local_rank
    ranks = tuple(range(first, first + local_world))
    name = f"{INTERNAL_GROUP_PREFIX}mp_spawn:{first // local_world}"
    st.channel.send(GroupCreated(rank, name, "mp_spawn", ranks, backend="", backend_config=""))
    _wait_output_read()
    HostGroup(name, ranks, local_rank).exchange("mp.spawn join", b"")


def _wait_output_read(polls: int = 2000) -> None:
    """Before the join: until the CLI has read what this rank wrote to its stdout and stderr
    pipes. The CLI reads each rank's pipe on a thread of its own, so without this a child's last
    lines could reach the terminal after the parent's first line past the join (a race seen in
    CI), where a real mp.spawn's children write to the terminal before the join returns. Pipes
    only (FIONREAD); bounded (about 2 s of real time), so a stalled reader never hangs the join;
    real sleeps, no simulated time."""
    import fcntl
    import stat
    import struct
    import termios

    from phantora_prof.runtime.process.clock import real_sleep

    sys.stdout.flush()
    sys.stderr.flush()
    for fd in (1, 2):
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue  # a file or a terminal: nothing reads it for us
        except OSError:
            continue
        for _ in range(polls):
            if struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0] == 0:
                break
            real_sleep(0.001)


def _request_relaunch(nprocs: int) -> None:
    """Tell the CLI to run the script again as `nprocs` ranks, and end this rank."""
    path = os.environ[REQUEST_ENV]
    with open(path, "w") as f:
        f.write(str(nprocs))
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(EXIT_CODE)


def install() -> None:
    """Replace torch.multiprocessing's spawn / start_processes; hold the output back when this
    rank is a relaunch (QUIET_ENV)."""
    global _quiet
    import torch.multiprocessing as tmp
    import torch.multiprocessing.spawn as spawn_module

    for target in (tmp, spawn_module):
        target.spawn = _start_processes  # the same signature as torch's spawn
        target.start_processes = _start_processes
    if os.environ.get(QUIET_ENV) == "1" and _quiet is None:
        _quiet = _QuietUntilSpawn()


def release_at_exit() -> None:
    """The rank ends: output still held back (it never reached mp.spawn) is written out, so a
    relaunched rank's error is not lost."""
    if _quiet is not None and _quiet.active:
        _quiet.release(replay=True)
