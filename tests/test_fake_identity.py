"""The program does not see simulated CUDA tensors as FakeTensors (runtime/patches/fake_identity.py).

Libraries that ask `isinstance(t, torch._subclasses.FakeTensor)` to know whether they are
being traced (HF transformers' `is_tracing`) must take a real CUDA run's eager path."""
from __future__ import annotations

SCRIPT = '''
import torch
import torch._subclasses as S
from torch._subclasses import FakeTensor
from torch._subclasses.fake_tensor import FakeTensor as SubmoduleFakeTensor

x = torch.ones(4, 512, dtype=torch.long, device="cuda")
print("package attribute", isinstance(x, S.FakeTensor))
print("from import", isinstance(x, FakeTensor))
print("submodule", isinstance(x, SubmoduleFakeTensor))
print("typo stays an error", not hasattr(S, "FakeTensr"))

def is_tracing(t):  # HF transformers' check, in short
    return isinstance(t, getattr(torch, "_subclasses").FakeTensor)

mask = None if (not is_tracing(x) and bool(x.bool().all())) else x
print("mask skipped", mask is None)
'''


def test_the_program_sees_no_faketensor(cli):
    (cli.cwd / "ident.py").write_text(SCRIPT)
    r = cli("--no-trace", "python", "ident.py")
    assert r.returncode == 0, r.stderr
    lines = dict(line.rsplit(" ", 1) for line in r.stdout.splitlines() if line.rsplit(" ", 1)[-1] in ("True", "False"))
    assert lines == {"package attribute": "False", "from import": "False", "submodule": "True",
                     "typo stays an error": "True", "mask skipped": "True"}
