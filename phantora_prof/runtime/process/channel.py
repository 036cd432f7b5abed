"""The rank's connection to the coordinator: batched one-way messages, blocking requests.

A training step issues thousands of ops; sending each as its own frame would cost more
than simulating it. Messages are buffered and sent in batches; a request (a sync point)
flushes the buffer with the request at its end and waits for the single reply.

The batches are small enough for the coordinator to work while the rank runs: a GPT-2 step
sends ~1,500 messages, so with 2,048 per batch (before 2026-12-03) all of them left at the
step's closing `synchronize()` and the rank then waited for the coordinator to handle them
(~0.1-0.2 s of a ~0.55 s simulated step). 256 per batch overlaps the two processes; a
batch's framing and wake-up cost is small beside handling its messages.
"""
from __future__ import annotations

import os
import socket
import threading
from typing import Any

from phantora_prof import protocol
from phantora_prof.errors import ProtocolError

BATCH_SIZE = 256


class Channel:
    def __init__(self, address: str):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(address)
        self._buf: list = []
        self._lock = threading.RLock()
        self.closed = False
        self._sending = False  # a frame is being written (a signal handler must not start another)
        # Called before each batch goes out: a message to send with it, or None (the native op
        # recorder's finished host records, runtime/dispatch/op_recorder.py).
        self.before_send: Any = None

    def _collect(self) -> None:
        if self.before_send is not None:
            msg = self.before_send()
            if msg is not None:
                self._buf.append(msg)

    def send(self, msg: Any) -> None:
        with self._lock:
            self._buf.append(msg)
            if len(self._buf) >= BATCH_SIZE:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self.closed:
            self._collect()
        if self._buf and not self.closed:
            batch, self._buf = self._buf, []
            self._send(batch)

    def _send(self, batch: list) -> None:
        self._sending = True
        try:
            protocol.send_batch(self._sock, batch)
        finally:
            self._sending = False

    def request(self, msg: Any) -> Any:
        with self._lock:
            if self.closed:
                raise ProtocolError("the coordinator connection is closed")
            self._collect()
            self._buf.append(msg)
            batch, self._buf = self._buf, []
            self._send(batch)
            reply = protocol.recv_batch(self._sock)
            if reply is None:
                raise ProtocolError("the coordinator closed the connection (did it crash? see its log)")
            return reply[0]

    def close(self, final: Any = None) -> None:
        with self._lock:
            if self.closed:
                return
            self._collect()
            if final is not None:
                self._buf.append(final)
            self._flush_locked()
            self.closed = True
            try:
                self._sock.shutdown(socket.SHUT_WR)
                # wait for the coordinator to acknowledge (it closes its side)
                self._sock.settimeout(60)
                while self._sock.recv(4096):
                    pass
            except OSError:
                pass
            self._sock.close()


    def close_from_signal_handler(self, final: Any, before: list | None = None) -> bool:
        """`close(final)` from a signal handler (the process is being stopped): not when the
        interrupted code was writing a frame (a second frame would corrupt the stream), nor
        when another thread holds the connection. Returns whether it closed."""
        if self.closed or self._sending:
            return False
        if not self._lock.acquire(timeout=1.0):
            return False
        try:
            if self._sending:
                return False
            self._buf.extend(before or [])
            self.close(final)
            return True
        finally:
            self._lock.release()


def connect_from_env() -> Channel:
    address = os.environ.get("PHANTORA_COORDINATOR")
    if not address:
        raise ProtocolError("PHANTORA_COORDINATOR is not set: rank processes are started by the phantora-prof CLI")
    return Channel(address)
