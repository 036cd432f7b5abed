"""The program's code does not see that simulated CUDA tensors are FakeTensors.

Simulated CUDA tensors are instances of torch's FakeTensor, which torch uses for tracing
(torch.compile, torch.export). Libraries ask about it to decide whether they are being traced,
and then take the tracing path where a real CUDA run takes the eager one. HF transformers'
`is_tracing(tensor)` is `isinstance(tensor, torch._subclasses.FakeTensor)` among others: under
the simulator its masking utilities skipped the `padding_mask.all()` check and built a 4-D
attention mask for every forward, where a real run passes no mask (HF BERT: 12 extra
`aten::where` per step, attention with a mask instead of without, ~2 ms per step of GPU time).

So `torch._subclasses.FakeTensor`, the name such libraries read, resolves by who asks: torch
itself and the simulator get the real class; the program and the libraries it imports get a
stand-in class that no tensor is an instance of. The attribute is removed from the package
and served by a module `__getattr__` (PEP 562), which looks at the caller's module name.

Once the program calls torch.compile, everyone gets the real class (`show_the_real_class`).

Not hidden (approximate, on purpose): `torch._subclasses.fake_tensor.FakeTensor` (the
submodule's name, which torch's own code imports), `torch._subclasses.fake_tensor.is_fake`,
and `type(t)`. A program that builds its own FakeTensorMode and checks its tensors through
`torch._subclasses.FakeTensor` sees the stand-in too.
"""
from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

_INTERNAL_PREFIXES = ("torch", "functorch", "phantora_prof", "importlib", "typing")
_installed = False
_everyone_sees_the_real_class = False


class FakeTensorAsSeenByTheProgram:
    """What `torch._subclasses.FakeTensor` is to the program under phantora-prof: a class no
    tensor is an instance of (see the module docstring). Not a torch.Tensor subclass: defining
    one runs torch's Python and moved the simulated host clock."""


def _internal(module_name: str | None) -> bool:
    if not module_name:
        return False
    return any(module_name == p or module_name.startswith(p + ".") for p in _INTERNAL_PREFIXES)


def install() -> None:
    """Serve `torch._subclasses.FakeTensor` by caller (idempotent)."""
    global _installed
    if _installed:
        return
    pkg = sys.modules.get("torch._subclasses")
    real = getattr(pkg, "FakeTensor", None) if pkg is not None else None
    if real is None or "FakeTensor" not in vars(pkg):
        log.debug("torch._subclasses.FakeTensor not found: nothing to hide")
        return
    previous = vars(pkg).get("__getattr__")

    def __getattr__(name: str) -> Any:
        if name == "FakeTensor":
            if _everyone_sees_the_real_class:
                return real
            caller = sys._getframe(1)
            return real if _internal(caller.f_globals.get("__name__")) else FakeTensorAsSeenByTheProgram
        if previous is not None:
            return previous(name)
        raise AttributeError(f"module 'torch._subclasses' has no attribute {name!r}")

    delattr(pkg, "FakeTensor")
    pkg.__getattr__ = __getattr__
    _installed = True


def show_the_real_class() -> None:
    """From now on everyone gets the real class (called when the program first uses
    torch.compile). Dynamo evaluates the program's attribute lookups itself, builds guards on
    their results and checks those guards from the program's frames: an answer that depends on
    the caller fails them ("Guard failed on the same frame it was created"). A compiled model
    asks `torch.compiler.is_compiling()` anyway; what is lost is the stand-in's effect on the
    program's eager parts (see the module docstring)."""
    global _everyone_sees_the_real_class
    _everyone_sees_the_real_class = True
