"""Rank processes forked from one process that has already imported torch.

Every rank is a Python process that loads the fake-CUDA library, imports torch and the
simulator's runtime, then runs the program. The imports are the same in every rank and take
~2-4 s of CPU on a 2-core machine (`import torch` alone ~2 s): an 8-rank run spent most of its
start-up importing the same modules eight times, and each rank held its own copy of them.

With several ranks on a node, the launcher starts one *fork server* first
(`python -m phantora_prof.runtime.process.fork_server FD DEVICE_COUNT LAUNCHER_PID`). It loads the library,
imports torch and the runtime (nothing else: no op runs, no thread starts, so forking is safe),
then forks one child per rank the launcher asks for. A child takes the rank's environment,
argv, and its stdout/stderr pipes (passed over the control socket), reseeds Python's and
numpy's random generators as a fresh interpreter would, and runs `bootstrap.main()`, exactly
what `python -m phantora_prof.runtime.process.bootstrap` runs. The children share the
imported modules' pages with the server until they write to them.

The control socket is a SOCK_SEQPACKET socketpair (one message per request or report):
launcher -> server: {"fork": id, "env": {...}, "argv": [...]} with the two pipe ends;
server -> launcher: {"forked": id, "pid": pid} and {"exited": pid, "code": code}. The server
is the children's parent, so it reaps them and reports their exit codes; `ForkedRank` gives
the launcher and the coordinator the part of `subprocess.Popen` they use.

`PHANTORA_NO_FORK_SERVER=1` starts every rank as its own `python` process, as before.
"""
from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

ENV_OFF = "PHANTORA_NO_FORK_SERVER"
_MAX_MESSAGE = 1 << 20  # an environment and an argv


def enabled() -> bool:
    return os.environ.get(ENV_OFF) != "1" and hasattr(socket, "send_fds") and sys.platform.startswith("linux")


# ---------------------------------------------------------------------------------------
# the server process


def serve(control_fd: int, device_count: int, launcher_pid: int) -> None:
    """Import what every rank imports, then fork ranks on request until the launcher hangs up."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the launcher stops the ranks; the server ends when it hangs up
    _die_with(launcher_pid)
    from phantora_prof.runtime.process import native_loader

    native_loader.load_fake_cuda(device_count)
    import torch  # noqa: F401 - the point of the server
    from phantora_prof.runtime.process import bootstrap, install  # noqa: F401 - what a rank imports next

    sock = socket.socket(fileno=control_fd)
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.05)
        _reap(sock, children)
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 2)
        except OSError:
            data, fds = b"", []
        if not data:  # the launcher is gone: wait for the children, then leave
            while children:
                _reap(sock, children, block=True)
            return
        request = json.loads(data)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            _become_rank(request, fds)  # never returns
        for fd in fds:
            os.close(fd)
        children.add(pid)
        _send(sock, {"forked": request["fork"], "pid": pid})


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
    """In the forked child: the rank's streams, environment and argv, then the bootstrap."""
    code = 1
    try:
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
        _fresh_random_state()
        _fresh_main_module()
        from phantora_prof.runtime.process import bootstrap

        sys.argv = [bootstrap.__file__, *request["argv"]]
        bootstrap.main()  # ends the process itself
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as a Python process would, then the exit code
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


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


# ---------------------------------------------------------------------------------------
# the launcher's side


class ForkServer:
    """The launcher's handle on a running fork server (see the module doc)."""

    def __init__(self, device_count: int, env: dict[str, str]) -> None:
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "phantora_prof.runtime.process.fork_server", str(theirs.fileno()),
             str(device_count), str(os.getpid())], env=env, pass_fds=[theirs.fileno()])
        theirs.close()
        self._lock = threading.Lock()
        self._forked: dict[int, int] = {}  # request id -> pid
        self._codes: dict[int, int] = {}  # pid -> exit code
        self._changed = threading.Condition(self._lock)
        self._next = 0
        self._reader = threading.Thread(target=self._read, name="fork-server-reports", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(_MAX_MESSAGE)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    self._server_gone = True
                    self._changed.notify_all()
                    return
                msg = json.loads(data)
                if "forked" in msg:
                    self._forked[msg["forked"]] = msg["pid"]
                else:
                    self._codes[msg["exited"]] = msg["code"]
                self._changed.notify_all()

    _server_gone = False

    def start(self, argv: list[str], env: dict[str, str], capture: bool) -> ForkedRank:
        """Fork a rank running `bootstrap` with `argv` and `env`; its stdout and stderr are pipes
        (ForkedRank.stdout / .stderr) when `capture`, else the launcher's own."""
        if capture:
            (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
            fds = [out_w, err_w]
        else:
            out_r = err_r = None
            fds = [os.dup(1), os.dup(2)]
        with self._lock:
            rid = self._next
            self._next += 1
        try:
            socket.send_fds(self._sock, [json.dumps({"fork": rid, "env": env, "argv": argv}).encode()], fds)
        finally:
            for fd in fds:
                os.close(fd)
        with self._changed:
            while rid not in self._forked and not self._server_gone:
                self._changed.wait(timeout=1.0)
                if self._proc.poll() is not None:
                    self._server_gone = True
            if rid not in self._forked:
                raise RuntimeError(f"the rank fork server ended (exit code {self._proc.poll()}) before starting a rank")
            pid = self._forked[rid]
        return ForkedRank(self, pid, os.fdopen(out_r, "rb") if capture else None,
                          os.fdopen(err_r, "rb") if capture else None)

    def code_of(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while pid not in self._codes:
                if self._server_gone:
                    return self._code_without_server(pid)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._changed.wait(timeout=0.2 if left is None else min(0.2, left))
            return self._codes[pid]

    def _code_without_server(self, pid: int) -> int | None:
        """The server died (killed?) and cannot report: a child still running has no code yet."""
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            self._codes[pid] = -signal.SIGKILL
            return self._codes[pid]
        except PermissionError:
            pass
        return None

    def close(self) -> None:
        """No more ranks: the server waits for its children and ends."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._sock.close()


class ForkedRank:
    """A rank forked by the fork server: what the launcher and the coordinator use of Popen."""

    def __init__(self, server: ForkServer, pid: int, stdout: Any, stderr: Any) -> None:
        self._server = server
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.code_of(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.code_of(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
