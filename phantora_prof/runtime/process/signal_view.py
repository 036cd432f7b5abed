"""`signal.signal` and `signal.getsignal` as the script sees them while a rank notes its SIGINTs
(runtime/process/interrupts.py): the script's own SIGINT handler is shown and replaced as
usual, while the one installed runs interrupts' note first.

This file is exempt from the simulator's own frames in the host model (runtime/host/pyhost.py):
a script that calls `signal.signal` runs the standard library's Python wrapper, counted as its
host time, and so it is here (these few lines and the wrapper they call), not hidden because
the call passed through the simulator's package.
"""
from __future__ import annotations

import signal as _stdlib
from typing import Any, Callable

_SIGINT = _stdlib.SIGINT
_set_handler: Callable = _stdlib.signal
_get_handler: Callable = _stdlib.getsignal
_noted: Callable | None = None
_script_handler: list = [None]


def configure(noted: Callable, script_handler: list) -> None:
    """Bind the view to interrupts' note handler and its record of the script's handler, and
    take the standard library's functions' docstrings."""
    global _noted, _script_handler
    _noted, _script_handler = noted, script_handler
    signal.__doc__, getsignal.__doc__ = _set_handler.__doc__, _get_handler.__doc__


def signal(signalnum: int, handler: Any) -> Any:
    if signalnum != _SIGINT:
        return _set_handler(signalnum, handler)
    _set_handler(signalnum, _noted if callable(handler) else handler)  # raises where signal.signal would
    previous, _script_handler[0] = _script_handler[0], handler
    return previous


def getsignal(signalnum: int) -> Any:
    current = _get_handler(signalnum)
    return _script_handler[0] if signalnum == _SIGINT else current
