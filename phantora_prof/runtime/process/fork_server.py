"""Rank processes forked from one process that has already imported torch.

Every rank is a Python process that loads the fake-CUDA library, imports torch and the
simulator's runtime, then runs the program. The imports are the same in every rank and take
~2-4 s of CPU on a 2-core machine (`import torch` alone ~2 s): an 8-rank run spent most of its
start-up importing the same modules eight times, and each rank held its own copy of them.

With several ranks on a node, the launcher starts one *fork server* first
(`python -m phantora_prof.runtime.process.fork_server FD DEVICE_COUNT LAUNCHER_PID GPU`). It loads the library,
imports torch and the runtime (nothing else: no op runs, no thread starts, so forking is safe),
then forks one child per rank the launcher asks for. A child takes the rank's environment,
argv, and its stdout/stderr pipes (passed over the control socket), reseeds Python's and
numpy's random generators as a fresh interpreter would, and runs `bootstrap.main()`, exactly
what `python -m phantora_prof.runtime.process.bootstrap` runs. The children share the
imported modules' pages with the server until they write to them.

The control socket is a SOCK_SEQPACKET socketpair (one message per request or report):
launcher -> server: {"fork": id, "env": {...}, "argv": [...]} with the two pipe ends;
server -> launcher: {"forked": id, "pid": pid} and {"exited": pid, "code": code}. The server
is the children's parent, so it reaps them and reports their exit codes. The launcher's side
(starting the server, `ForkedRank`: what the launcher and the coordinator use of
`subprocess.Popen`) is `phantora_prof/rank_forks.py`; `PHANTORA_NO_FORK_SERVER=1` starts
every rank as its own `python` process, as before.
"""
from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import sys

from phantora_prof.rank_forks import MAX_MESSAGE

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------
# the server process


def serve(control_fd: int, device_count: int, launcher_pid: int, gpu_key: str) -> tuple[dict, list[int]] | None:
    """Import what every rank imports, then fork ranks on request until the launcher hangs up
    (None). In a forked child it returns that rank's request and pipe ends."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the launcher stops the ranks; the server ends when it hangs up
    _die_with(launcher_pid)
    from phantora_prof.runtime.process import native_loader

    native_loader.load_fake_cuda(device_count)
    import torch  # noqa: F401 - the point of the server
    from phantora_prof.runtime.process import bootstrap, install  # noqa: F401 - what a rank imports next

    install.preload()  # and what install() imports when it runs, shared by every rank
    _preload_cost_data(gpu_key)
    _freeze_shared_objects()

    sock = socket.socket(fileno=control_fd)
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.05)
        _reap(sock, children)
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 2)
        except OSError:
            data, fds = b"", []
        if not data:  # the launcher is gone: wait for the children, then leave
            while children:
                _reap(sock, children, block=True)
            return None
        request = json.loads(data)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            return request, fds
        for fd in fds:
            os.close(fd)
        children.add(pid)
        _send(sock, {"forked": request["fork"], "pid": pid})


def _preload_cost_data(gpu_key: str) -> None:
    """The kernel-time model's tables (cost/preload.py), read once for every rank. A table
    that fails to load here is left to the ranks, which report it as they would without the
    server."""
    from phantora_prof.cost import preload

    try:
        preload.preload(gpu_key)
    except Exception as exc:  # noqa: BLE001 - the ranks load it again and say what is wrong
        log.debug("cost data not preloaded: %s", exc)


def _freeze_shared_objects() -> None:
    """Collect, then freeze what the server imported, before any fork.

    Every rank collects and freezes its start-up objects itself (bootstrap's
    `_freeze_startup_objects`); done there alone, that first full collection walks the
    ~300,000 objects inherited from the server and writes to every one's collector header,
    so each rank took a private copy of every page that holds one: ~45 MiB per rank (PSS per
    rank of the DDP example, 8 ranks: 226 -> 175-200 MiB). Frozen here first, the rank's
    collection walks only what the rank made itself, and its objects end up in the same
    state as before (all frozen), so nothing the script or the host model sees changes."""
    import gc

    gc.collect()
    gc.freeze()


def _die_with(launcher_pid: int) -> None:
    """The server ends with the CLI even when the CLI is killed (Linux's parent-death signal);
    its ranks, whose parent it is, then get theirs (runtime/process/bootstrap.py)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != launcher_pid:  # the CLI was gone before the call
        os._exit(1)


def _reap(sock: socket.socket, children: set[int], block: bool = False) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})
        if block:
            return


def _send(sock: socket.socket, msg: dict) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:
        pass  # the launcher is gone


def _become_rank(request: dict, fds: list[int]) -> None:
    """In the forked child: the rank's streams, signals, environment, argv, random state and
    `__main__`; the caller then runs the bootstrap."""
    for target, fd in zip((1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(request["env"])
    # the rank's parent is this server, which lives exactly as long as the CLI: the rank's
    # parent-death check (bootstrap._stop_with_the_cli) watches it
    os.environ["PHANTORA_CLI_PID"] = str(os.getppid())
    _check_preloaded_profile()
    _fresh_random_state()
    _fresh_main_module()
    from phantora_prof.runtime.process import bootstrap

    sys.argv = [bootstrap.__file__, *request["argv"]]


def _check_preloaded_profile() -> None:
    """The host profile the server's preload read (phantora_prof.hostcost computes its tables at
    import) must be the rank's: a server started without the run's profile gave every forked rank
    the default host whatever --host said."""
    hostcost = sys.modules.get("phantora_prof.hostcost")
    if hostcost is None:
        return
    preloaded = hostcost.PROFILE_SPEC or hostcost.DEFAULT_PROFILE
    wanted = os.environ.get(hostcost.ENV_PROFILE) or hostcost.DEFAULT_PROFILE
    if preloaded != wanted:
        raise RuntimeError(f"the rank fork server preloaded host profile {preloaded!r}, the rank asks for {wanted!r}")


def _fresh_random_state() -> None:
    """A fresh interpreter seeds Python's (and numpy's, at import) generator from the OS."""
    import random

    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()
        except Exception:  # noqa: BLE001 - a numpy without the legacy global generator
            pass


def _fresh_main_module() -> None:
    """`-c CODE` runs in `__main__`'s namespace: a new, empty one, as in a new interpreter."""
    import types

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main


if __name__ == "__main__":
    _forked = serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    if _forked is not None:
        _become_rank(*_forked)
        from phantora_prof.runtime.process import bootstrap

        # called from this module's level, so a rank's stack is as deep as under
        # `python -m ...bootstrap` (a program that formats its own stack, e.g. a warning, runs
        # the same Python either way); it ends the process itself
        bootstrap.main()
