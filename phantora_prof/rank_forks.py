"""The launcher's side of the rank fork server (runtime/process/fork_server.py: why and how).

`ForkServer` starts the server process and asks it for ranks; `ForkedRank` is what the
launcher and the coordinator use of `subprocess.Popen` (poll, wait, signals, the output
pipes), for a process that is the server's child, not the launcher's: its exit code comes
from the server's reports.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

ENV_OFF = "PHANTORA_NO_FORK_SERVER"
MAX_MESSAGE = 1 << 20  # the largest control message: a rank's environment and argv


def enabled() -> bool:
    """Fork servers are used unless PHANTORA_NO_FORK_SERVER=1 (Linux: fd passing, parent-death signal)."""
    return os.environ.get(ENV_OFF) != "1" and hasattr(socket, "send_fds") and sys.platform.startswith("linux")


class ForkServer:
    """The launcher's handle on a running fork server (runtime/process/fork_server.py)."""

    def __init__(self, device_count: int, env: dict[str, str], gpu_key: str) -> None:
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "phantora_prof.runtime.process.fork_server", str(theirs.fileno()),
             str(device_count), str(os.getpid()), gpu_key], env=env, pass_fds=[theirs.fileno()])
        theirs.close()
        self._changed = threading.Condition()  # guards the reports below; notified when one arrives
        self._forked: dict[int, int] = {}  # request id -> pid
        self._codes: dict[int, int] = {}  # pid -> exit code
        self._server_gone = False
        self._next = 0
        self._reader = threading.Thread(target=self._read, name="fork-server-reports", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(MAX_MESSAGE)
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

    def start(self, argv: list[str], env: dict[str, str]) -> ForkedRank:
        """Fork a rank running `bootstrap` with `argv` and `env`; its stdout and stderr are pipes
        (ForkedRank.stdout / .stderr)."""
        (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        fds = [out_w, err_w]
        with self._changed:
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
        return ForkedRank(self, pid, os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))

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


