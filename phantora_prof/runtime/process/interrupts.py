"""Ctrl-C reaches a rank once, as it reaches `python script.py` once.

A Ctrl-C in a terminal sends SIGINT to every process of the foreground job: the CLI and the
rank processes alike. The CLI must then leave the ranks alone (a script whose
`except KeyboardInterrupt:` saves a checkpoint would be interrupted a second time, or killed,
in the middle of its save), but a SIGINT sent to the CLI alone (`kill -INT`, a parent process)
must still reach the ranks, as torchrun forwards the signal it receives. The CLI cannot tell
the two apart from its own signal, so each rank tells it: the rank's SIGINT handler leaves a
note (an empty file `sigint.<rank>` in the run's private directory, the coordinator socket's) before it runs the script's own
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

import _signal

from phantora_prof.protocol import COORDINATOR_ENV, sigint_note_path
from phantora_prof.runtime.host.pyhost import PACKAGE_DIR, PROGRAM_FILES
from phantora_prof.runtime.process import signal_view


# A KeyboardInterrupt raised inside the simulator's own Python (the capture mode in the middle of
# an op, the channel in the middle of a message) would leave its state half updated, where real
# torch finishes the C++ op and raises at the script's next bytecode. So when the default
# handler finds the main thread inside the simulator, the interrupt is left pending: the
# capture mode raises it when the op it is simulating returns to the script
# (`raise_if_pending`, called by CaptureMode.__torch_dispatch__ on the main thread), and for
# stretches with no op (a long wait), the signal is also sent again every DEFER_S until the
# main thread is found in the script, for at most MAX_DEFERRALS rounds (then it raises where
# it lands). Either way the script sees one KeyboardInterrupt.
DEFER_S = 0.005
MAX_DEFERRALS = 400
_PACKAGE = str(PACKAGE_DIR) + os.sep


class _State:
    pending = False  # a KeyboardInterrupt waits for the main thread to leave the simulator
    redelivered = 0  # SIGINTs sent again by the timer and not yet handled (ours, not the user's)
    rounds = 0


PENDING = _State()


def _inside_the_simulator(frame: Any) -> bool:
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_PACKAGE) and filename not in PROGRAM_FILES:
            return True
        frame = frame.f_back
    return False


def raise_if_pending(caller: Any) -> None:
    """Called on the main thread when a captured op returns to `caller` (a frame): raise the
    pending KeyboardInterrupt there if `caller` is the script's (not a simulator frame an op
    was dispatched from)."""
    if PENDING.pending and not _inside_the_simulator(caller):
        PENDING.pending = False
        PENDING.rounds = 0
        raise KeyboardInterrupt


def _send_again(signum: int) -> None:
    PENDING.redelivered += 1
    try:
        os.kill(os.getpid(), signum)
    except OSError:
        PENDING.redelivered -= 1


def _deliver_again(signum: int) -> None:
    import threading

    timer = threading.Timer(DEFER_S, _send_again, (signum,))
    timer.daemon = True
    timer.start()


def _default_interrupt(signum: int, frame: Any) -> None:
    """The default handler's KeyboardInterrupt, raised in the script's code only."""
    ours = PENDING.redelivered > 0
    if ours:
        PENDING.redelivered -= 1
        if not PENDING.pending:
            return  # the capture mode raised it already: this re-delivery is stale
    if _inside_the_simulator(frame) and PENDING.rounds < MAX_DEFERRALS:
        PENDING.pending = True
        if ours or PENDING.redelivered == 0:  # one timer at a time
            PENDING.rounds += 1
            _deliver_again(signum)
        return
    PENDING.pending = False
    PENDING.rounds = 0
    raise KeyboardInterrupt


def install(rank: int) -> None:
    """In a rank process, before the script runs: SIGINT handlers leave a note first (see the
    module docstring). Does nothing outside a run (no coordinator in the environment)."""
    address = os.environ.get(COORDINATOR_ENV)
    if not address:
        return
    path = sigint_note_path(os.path.dirname(address), rank)
    script_handler: list[Any] = [_signal.getsignal(int(signal.SIGINT))]

    def noted(signum: int, frame: Any) -> Any:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        except OSError:
            pass
        handler = script_handler[0]
        if handler is signal.default_int_handler:
            return _default_interrupt(signum, frame)
        return handler(signum, frame)

    signal_view.configure(noted, script_handler)
    if callable(script_handler[0]):
        # through _signal, the C module: the stdlib's Python wrapper would count as the script's
        # host time (runtime/host/pyhost.py counts the frames outside this package)
        _signal.signal(int(signal.SIGINT), noted)
    signal.signal, signal.getsignal = signal_view.signal, signal_view.getsignal
