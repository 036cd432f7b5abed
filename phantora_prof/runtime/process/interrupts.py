"""Ctrl-C reaches a rank once, as it reaches `python script.py` once.

A Ctrl-C in a terminal sends SIGINT to every process of the foreground job: the CLI and the
rank processes alike. The CLI must then leave the ranks alone (a script whose
`except KeyboardInterrupt:` saves a checkpoint would be interrupted a second time, or killed,
in the middle of its save), but a SIGINT sent to the CLI alone (`kill -INT`, a parent process)
must still reach the ranks, as torchrun forwards the signal it receives. The CLI cannot tell
the two apart from its own signal, so each rank tells it: the rank's SIGINT handler leaves a
note (an empty file `sigint.<rank>` in the run's directory) before it runs the script's own
handler, and the CLI forwards SIGINT only to ranks with no note after a short wait
(`engine/coordinator.py`, `Coordinator._stopping`). A rank busy in C code for longer than the
wait gets the forwarded SIGINT too; CPython folds two SIGINTs that arrive before its main
thread runs the handler into one, so the script still sees one KeyboardInterrupt.

The script sees the signal module as usual: `signal.getsignal(SIGINT)` returns its own handler
(or the default one), and `signal.signal(SIGINT, h)` returns the previous one; SIG_IGN and
SIG_DFL are installed as they are (an ignored SIGINT leaves no note; the CLI's forwarded one is
ignored as well).
"""
from __future__ import annotations

import os
import signal
from typing import Any

from phantora_prof.protocol import SIGNAL_NOTES_ENV, sigint_note_path


def install(rank: int) -> None:
    """In a rank process, before the script runs: SIGINT handlers leave a note first (see the
    module docstring). Does nothing outside a run (no notes directory in the environment)."""
    notes_dir = os.environ.get(SIGNAL_NOTES_ENV)
    if not notes_dir:
        return
    path = sigint_note_path(notes_dir, rank)
    set_handler, get_handler = signal.signal, signal.getsignal
    script_handler: list[Any] = [get_handler(signal.SIGINT)]

    def noted(signum: int, frame: Any) -> Any:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        except OSError:
            pass
        handler = script_handler[0]
        if handler is signal.default_int_handler:
            raise KeyboardInterrupt
        return handler(signum, frame)

    def signal_(signalnum: int, handler: Any) -> Any:
        if signalnum != signal.SIGINT:
            return set_handler(signalnum, handler)
        set_handler(signalnum, noted if callable(handler) else handler)  # raises where signal.signal would
        previous, script_handler[0] = script_handler[0], handler
        return previous

    def getsignal(signalnum: int) -> Any:
        return script_handler[0] if signalnum == signal.SIGINT else get_handler(signalnum)

    signal_.__doc__, getsignal.__doc__ = set_handler.__doc__, get_handler.__doc__
    if callable(script_handler[0]):
        set_handler(signal.SIGINT, noted)
    signal.signal, signal.getsignal = signal_, getsignal
