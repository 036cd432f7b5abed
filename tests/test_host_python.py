"""Host time of the interpreter and of DataLoader workers (issue #15): runtime/host/pyhost.py,
runtime/host/dataloader.py, native/pyhost/pyhost.c."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from phantora_prof.runtime.host import pyhost

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def native():
    mod = pyhost.load()
    if mod is None:
        pytest.skip("no C compiler: the Python-call counter cannot be built")
    return mod


def _fib(n):
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def test_counts_python_calls_and_instructions_exactly(native):
    import gc

    native.configure(str(pyhost.PACKAGE_DIR) + os.sep, [])
    # no collection in the middle: a finalizer it runs is a Python call of its own (the runtime
    # pauses the counter during collections, runtime/host/pyhost.py _gc_pause; this test uses
    # the bare counter). With other test modules collected first, fib(10) counted 178 calls.
    gc.disable()
    native.attach()
    try:
        py0, op0, _ = native.counts()
        _fib(10)  # 177 Python calls
        py1, op1, _ = native.counts()
        _fib(10)
        py2, op2, _ = native.counts()
        x = 0
        for i in range(100):  # instructions without calls count too
            x += i
        py3, op3, _ = native.counts()
    finally:
        native.detach()
        gc.enable()
    assert py1 - py0 == 177  # fib(10) makes 177 calls; counts() is a C call, not a Python one
    assert op1 - op0 > 177 * 5  # each call runs several instructions
    assert (py2 - py1, op2 - op1) == (py1 - py0, op1 - op0)  # the same work, the same counts
    assert py3 == py2 and op3 - op2 > 100 * 3  # a loop: instructions, no calls


def test_the_simulators_own_frames_are_not_counted(native):
    """Everything under a frame whose file lies in phantora_prof/ is the simulator's work."""
    native.configure(str(pyhost.PACKAGE_DIR) + os.sep, [])
    from phantora_prof.cost import families

    native.attach()
    try:
        py0, op0, _ = native.counts()
        families.layout(None)  # a call into the package: its frames and callees are not counted
        py1, op1, _ = native.counts()
        _fib(5)
        py2, _, _ = native.counts()
    finally:
        native.detach()
    assert py1 - py0 == 0 and op1 - op0 < 30  # only the test's own few instructions around the call
    assert py2 - py1 == 15


class _Key:
    """A dict key whose hash collides with every other one's: each lookup calls __eq__."""

    def __init__(self, v):
        self.v = v

    def __hash__(self):
        return _fib(3)  # callees of __hash__ are not counted either

    def __eq__(self, other):
        return isinstance(other, _Key) and _fib(4) >= 0 and self.v == other.v


def test_hash_table_equality_is_not_counted(native):
    """How often a dict calls __eq__ depends on its layout (on memory addresses, for keys
    hashed by identity inside them): __eq__/__hash__ and their callees are not counted."""
    native.configure(str(pyhost.PACKAGE_DIR) + os.sep, [])
    table = {_Key(i): i for i in range(20)}
    native.attach()
    try:
        py0, op0, _ = native.counts()
        table.get(_Key(0))  # one probe: __eq__ once
        py1, op1, _ = native.counts()
        table.get(_Key(19))  # 20 probes
        py2, op2, _ = native.counts()
    finally:
        native.detach()
    assert py1 - py0 == 1  # _Key(0)'s __init__; neither __hash__ nor __eq__
    assert (py2 - py1, op2 - op1) == (py1 - py0, op1 - op0)


class _Value:
    pass


def test_weak_dictionary_removals_are_not_counted(native):
    """A WeakValueDictionary's removal callback runs wherever the program is when a value
    dies; the ones that fill during a simulated step are FakeTensorMode's memos, which a CUDA
    run does not have: not counted."""
    import weakref

    native.configure(str(pyhost.PACKAGE_DIR) + os.sep, [])
    memo = weakref.WeakValueDictionary()
    values = [_Value() for _ in range(10)]
    for i, v in enumerate(values):
        memo[i] = v
    del v
    native.attach()
    try:
        py0, op0, _ = native.counts()
        values.clear()  # ten removal callbacks run here
        py1, op1, _ = native.counts()
    finally:
        native.detach()
    assert len(memo) == 0
    assert py1 - py0 == 0 and op1 - op0 < 20  # before: 10 calls, ~210 instructions


def test_pause_resume_skips_a_region_and_counts_stay_balanced(native):
    native.configure("/nonexistent/", [])
    native.attach()
    try:
        py0, _, _ = native.counts()
        native.pause()
        native.pause()  # nested
        _fib(8)
        native.resume()
        _fib(3)  # still paused: the outermost resume restores counting
        native.resume()
        _fib(4)
        py1, _, _ = native.counts()
    finally:
        native.detach()
    assert py1 - py0 == 9  # fib(4)'s 9 calls only


def test_take_returns_what_was_counted_since_the_last_take(native):
    """The charge mark lives in the native module so that the op recorder's clock reads skip
    the Python callback in C when nothing is pending (runtime/host/pyhost.py pending_ns)."""
    native.configure("/nonexistent/", [])
    native.reset()
    native.attach()
    try:
        first = native.take()  # no mark yet: nothing to charge
        _fib(4)
        counted = native.take()
        unchanged = native.take()
    finally:
        native.detach()
    assert first is None
    assert counted[0] == 9 and counted[1] > 0  # fib(4): 9 calls
    assert unchanged[0] == 0 and unchanged[1] < 10  # only the instructions between the two takes


def test_our_frame_that_resumes_counting_is_still_not_counted(native, tmp_path):
    """A function of the simulator that starts while the hook is paused and resumes it part
    way (the capture mode does) reports line events but no call event; its own instructions
    after resume() are the simulator's work, not the program's (they were counted once, and
    a refactor of the capture mode moved simulated time by 66 ns)."""
    import importlib.util

    mod = tmp_path / "oursmod.py"
    mod.write_text("def work(native):\n    native.resume()\n    acc = 0\n    for i in range(1000):\n"
                   "        acc += i\n    native.pause()\n    return acc\n")
    spec = importlib.util.spec_from_file_location("oursmod", mod)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    native.configure(str(tmp_path) + os.sep, [])
    native.attach()
    try:
        _, op0, _ = native.counts()
        native.pause()
        m.work(native)
        native.resume()
        _, op1, _ = native.counts()
        _fib(4)
        py2, op2, _ = native.counts()
    finally:
        native.detach()
    assert op1 - op0 < 30  # the 1000-iteration loop (~4,000 instructions) is not counted
    assert op2 - op1 > 9 * 5  # counting goes on after it


def test_paused_call_runs_its_function_uncounted(native):
    """paused_call(fn, ...) (C, no frame of its own) is how C++ callers reach Python that is not
    the program's with the hook off: torch's dispatch-rule lookup (runtime/host/pyhost.py)."""
    native.configure("/nonexistent/", [])
    native.attach()
    try:
        py0, op0, _ = native.counts()
        r = native.paused_call(_fib, 8)
        kw = native.paused_call(sorted, [3, 1, 2], reverse=True)
        py1, op1, _ = native.counts()
        with pytest.raises(ZeroDivisionError):
            native.paused_call(lambda: 1 / 0)
        py2, _, _ = native.counts()
        _fib(4)
        py3, _, _ = native.counts()
    finally:
        native.detach()
    assert (r, kw) == (21, [3, 2, 1])
    assert py1 - py0 == 0 and op1 - op0 < 40  # fib(8)'s 67 calls (~600 instructions) are not counted
    assert py3 - py2 == 9  # counting resumed after the exception: fib(4)'s 9 calls


def test_rule_lookup_answers_from_the_live_rules(native):
    """rule_lookup stands in for torch's find_torch_dispatch_rule (runtime/host/pyhost.py): it
    remembers per op the registry's own dict of rules, so a rule registered after the first
    lookup is found, and one removed is gone."""
    from types import MethodType

    registry: dict = {}
    asked = []

    def rules_of(op):
        asked.append(op)
        return registry.setdefault(op, {})

    look = MethodType(native.rule_lookup, (rules_of, {}, lambda op, torch_dispatch_class: ("fallback", op)))

    class A:
        pass

    class B:
        pass

    assert look("aten::add", A) is None
    registry["aten::add"][A] = rule = object()  # registered later
    assert look("aten::add", A) is rule and look("aten::add", B) is None
    del registry["aten::add"][A]
    assert look("aten::add", A) is None
    assert asked == ["aten::add"]  # the op's dict looked up once
    assert look("aten::mul", torch_dispatch_class=A) == ("fallback", "aten::mul")  # keywords: torch's function


class _Mode:
    in_kernel_invocation = False


class _Fake:
    """Stands for a FakeTensor: its instance dict holds its mode and its device."""

    def __init__(self, mode, device):
        self.fake_mode, self._fake_device = mode, device


def test_dispatch_entry_answers_prim_device_in_c_and_runs_the_rest_paused(native):
    """The capture mode's entry from C++ (CaptureMode._native_entry): prim::device of a tensor
    of the configured fake mode is read from its instance dict unless the mode is inside a
    kernel invocation; every other call reaches the Python method with the hook paused."""
    prim, other = object(), object()
    mode = _Mode()
    calls = []

    def impl(self, func, types, args, kwargs=None):
        calls.append(func)
        _fib(8)
        return "python"

    mine, theirs = _Fake(mode, "cuda:1"), _Fake(_Mode(), "cuda:1")
    native.configure("/nonexistent/", [])
    native.set_dispatch(impl, prim, mode, "_fake_device")
    native.attach()
    try:
        py0, _, _ = native.counts()
        fast = native.dispatch_entry(None, prim, (), (mine,), {})
        foreign = native.dispatch_entry(None, prim, (), (theirs,), {})
        mode.in_kernel_invocation = True
        inside = native.dispatch_entry(None, prim, (), (mine,), {})
        mode.in_kernel_invocation = False
        op = native.dispatch_entry(None, other, (), (1, 2), None)
        py1, _, _ = native.counts()
    finally:
        native.detach()
        native.set_dispatch(impl, None, None, None)
    assert fast == "cuda:1"
    assert (foreign, inside, op) == ("python", "python", "python") and calls == [prim, prim, other]
    assert py1 - py0 == 0  # impl's fib(8) ran paused, three times


def _run(script: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "phantora_prof", "--no-trace", *args, "python", str(path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


PYTHON_LOOP = """
import time, torch
x = torch.zeros(8, device="cuda")

def busy(n):
    acc = 0
    for i in range(n):
        acc += len(str(i))
    return acc

for n in (0, 20000, 0):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    busy(n)
    y = x + 1
    torch.cuda.synchronize()
    print("step_ms", (time.perf_counter() - t0) * 1e3)
"""


USER_MODE_RULE = """
import torch
from torch.utils._python_dispatch import TorchDispatchMode

class Counting(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

x = torch.ones(4, device="cuda")
with Counting():
    y = x + 1  # the rule lookup for aten::add and this mode, before any rule exists
calls = []

def rule(mode, func, types, args, kwargs):
    calls.append(func)
    return func(*args, **(kwargs or {}))

lib = torch.library.Library("aten", "FRAGMENT")
torch.library.register_torch_dispatch("aten::add.Tensor", Counting, rule, lib=lib)
with Counting():
    y = x + 1
lib._destroy()  # the rule is gone again
with Counting():
    y = x + 1
print("rule calls", len(calls))
"""


def test_a_dispatch_rule_registered_during_the_run_is_used(tmp_path):
    """torch.library.register_torch_dispatch rules reach a user's mode under the simulator
    (whose C lookup replaces torch's find_torch_dispatch_rule), also when registered after the
    op was first dispatched, and stop when removed."""
    r = _run(USER_MODE_RULE, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "rule calls 1" in r.stdout, r.stdout


def _steps(stdout: str) -> list[float]:
    return [float(line.split()[1]) for line in stdout.splitlines() if line.startswith("step_ms")]


def test_python_between_ops_costs_simulated_time_deterministically(tmp_path):
    r1 = _run(PYTHON_LOOP, tmp_path)
    assert r1.returncode == 0, r1.stderr[-2000:]
    s = _steps(r1.stdout)
    assert len(s) == 3
    # 20,000 iterations of Python take simulated time; the empty steps do not
    assert s[1] > s[0] + 1.0 and s[1] > s[2] + 1.0
    r2 = _run(PYTHON_LOOP, tmp_path)
    assert _steps(r2.stdout) == s  # counted, not timed: the same on every run
    off = _run(PYTHON_LOOP, tmp_path, "--no-host-python")
    assert off.returncode == 0, off.stderr[-2000:]
    so = _steps(off.stdout)
    assert so[1] == pytest.approx(so[0], rel=0.05)  # without it, Python is free


OPS_ONLY = """
import sys, torch
x = torch.zeros(64, device="cuda")
for _ in range(int(sys.argv[1])):   # two captured ops per iteration, almost no Python of the program's
    x = torch.add(x, 1.0)
    x = torch.mul(x, 0.5)
torch.cuda.synchronize()
"""


def _counted_per_function(tmp_path: Path, iterations: int) -> dict[tuple, int]:
    import json

    prof = tmp_path / f"pyhost{iterations}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{pyhost.ENV_PROFILE: str(prof)})
    path = tmp_path / "ops.py"
    path.write_text(textwrap.dedent(OPS_ONLY))
    r = subprocess.run([sys.executable, "-m", "phantora_prof", "--no-trace", "python", str(path), str(iterations)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return {(row[0], row[1], row[2]): row[4] for row in json.loads((prof / "pyhost-rank0.json").read_text())}


def test_the_dispatch_modes_own_machinery_is_not_counted(tmp_path):
    """Python that runs only because the simulator's dispatch mode is active (torch's
    _disable_dynamo wrapper around a mode's __torch_dispatch__, the dispatcher's
    find_torch_dispatch_rule, weakref.finalize for fake storages) is not the program's: it used
    to be ~110 counted instructions per captured op, 96% of a DDP step's counted Python."""
    few, many = _counted_per_function(tmp_path, 50), _counted_per_function(tmp_path, 350)
    grown = {k: v - few.get(k, 0) for k, v in many.items() if v - few.get(k, 0) > 0}
    loop = {k: v for k, v in grown.items() if k[0].endswith("ops.py")}
    others = {k: v for k, v in grown.items() if not k[0].endswith("ops.py")}
    assert loop and sum(loop.values()) < 600 * 20  # the loop's own instructions: a few per op
    assert not others, sorted(others.items(), key=lambda kv: -kv[1])[:5]  # nothing else grows with the ops


SUBCLASS_PYTHON = """
import sys, time, torch
from torch.utils._pytree import tree_map

N = 3000

def busy(n):
    acc = 0
    for i in range(n):
        acc += i * i
    return acc

class Wrap(torch.Tensor):
    \"\"\"A wrapper subclass that runs Python in its dispatch, as DTensor does.\"\"\"
    @staticmethod
    def __new__(cls, inner, work):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)
    def __init__(self, inner, work):
        self.inner, self.work = inner, work
    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        work = max(a.work for a in args if isinstance(a, Wrap))
        busy(work)
        out = func(*tree_map(lambda a: a.inner if isinstance(a, Wrap) else a, args), **(kwargs or {}))
        return tree_map(lambda t: Wrap(t, work) if isinstance(t, torch.Tensor) else t, out)

base = torch.zeros(8, device="cuda")
for name, x, outside in (("plain", Wrap(base, 0), 0), ("inside", Wrap(base, N), 0), ("outside", Wrap(base, 0), N)):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        busy(outside)
        y = torch.add(x, 1.0)
    torch.cuda.synchronize()
    print(name, (time.perf_counter() - t0) * 1e6)
"""


def test_python_inside_a_tensor_subclass_dispatch_costs_what_its_files_cost(tmp_path):
    """The same Python costs the same inside a tensor subclass's __torch_dispatch__ as outside
    it: what it costs per instruction is its files' (host_model.json python_files; DTensor's
    own files carry their measured weight). Before 2026-12-06 any Python inside a dispatch cost
    subclass_dispatch.opcode_ns, 3.4x a user's loop."""
    r = _run(SUBCLASS_PYTHON, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    us = {line.split()[0]: float(line.split()[1]) for line in r.stdout.splitlines()
          if line.split()[:1] and line.split()[0] in ("plain", "inside", "outside")}
    inside, outside = us["inside"] - us["plain"], us["outside"] - us["plain"]
    assert outside > 100  # 10 x 3000 iterations of Python cost simulated time
    assert inside / outside == pytest.approx(1.0, rel=0.05)


FILE_WEIGHTS = """
import sys, time, torch
sys.path.insert(0, "site-packages")
from torch_probe_pkg import probe  # a file below site-packages: its package's weight

def busy(n):
    acc = 0
    for i in range(n):
        acc += i * i
    return acc

x = torch.zeros(8, device="cuda")
for name, fn in (("user", busy), ("package", probe.busy)):
    x.add_(1)
    t0 = time.perf_counter()
    fn(20000)
    x.add_(1)
    print(name, (time.perf_counter() - t0) * 1e6)
"""


def test_a_packages_python_costs_its_measured_weight(tmp_path):
    """Python in a file below site-packages costs the file's (or its top-level package's)
    weight times a user's cost per instruction (host_model.json python_files, measured with
    tools/holdout/python_rates.py): the same loop in the program's own file and in a package's."""
    from phantora_prof import hostcost

    weights = hostcost.PYTHON_FILE_WEIGHTS
    pkg = tmp_path / "site-packages" / "torch_probe_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "probe.py").write_text("def busy(n):\n    acc = 0\n    for i in range(n):\n        acc += i * i\n"
                                  "    return acc\n")
    r = _run(FILE_WEIGHTS, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    us = {line.split()[0]: float(line.split()[1]) for line in r.stdout.splitlines()
          if line.split()[:1] and line.split()[0] in ("user", "package")}
    assert us["user"] > 100
    assert us["package"] / us["user"] == pytest.approx(1.0, rel=0.02)  # a package no table names: weight 1
    # the same file named in the table (a top-level package's weight), through the native hook directly
    from phantora_prof.runtime.host import pyhost

    native = pyhost.load()
    assert native is not None and weights.get("torch/", 1.0) > 1.5
    code = compile("def busy(n):\n    acc = 0\n    for i in range(n):\n        acc += i * i\n    return acc\n",
                   "/x/site-packages/torch/_probe.py", "exec")
    user = compile("def busy(n):\n    acc = 0\n    for i in range(n):\n        acc += i * i\n    return acc\n",
                   str(tmp_path / "mine.py"), "exec")
    ns_t, ns_u = {}, {}
    exec(code, ns_t)
    exec(user, ns_u)
    native.configure("/nonexistent-prefix/", [])
    native.set_rates({"torch/": int(round(weights["torch/"] * pyhost.WEIGHT_ONE))})
    native.attach()
    try:
        native.take()
        ns_t["busy"](1000)
        _, n_t, w_t = native.take()
        ns_u["busy"](1000)
        _, n_u, w_u = native.take()
    finally:
        native.detach()
        native.set_rates(None)
    assert n_u > 1000 and abs(n_t - n_u) < 10  # the same loop (and a few of this test's own instructions)
    assert w_u == n_u * pyhost.WEIGHT_ONE
    assert w_t / w_u == pytest.approx(weights["torch/"], rel=0.01)


LOADER = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        acc = 0
        for j in range(20000):   # per-sample Python work
            acc += len(str(j))
        return torch.full((16,), float(i))

workers = int(sys.argv[1])
dl = DataLoader(Slow(), batch_size=4, num_workers=workers)
model = torch.nn.Linear(16, 16).cuda()
times = []
it = iter(dl)
for step in range(12):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    batch = next(it).cuda()
    model(batch).sum().backward()
    torch.cuda.synchronize()
    times.append((time.perf_counter() - t0) * 1e3)
print("median_ms", sorted(times[4:])[len(times[4:]) // 2])
print("step_ns", [round(t * 1e6) for t in times])
"""


def _median(stdout: str) -> float:
    return next(float(line.split()[1]) for line in stdout.splitlines() if line.startswith("median_ms"))


def test_dataloader_workers_overlap_the_training_loop(tmp_path):
    (tmp_path / "loader.py").write_text(LOADER)
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    steps = {}

    def run(workers: int) -> float:
        r = subprocess.run([sys.executable, "-m", "phantora_prof", "--no-trace", "python", "loader.py", str(workers)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        steps.setdefault(workers, []).append(next(line for line in r.stdout.splitlines() if line.startswith("step_ns")))
        return _median(r.stdout)

    inline, four = run(0), run(4)
    # inline, each step pays for fetching its batch (4 samples of Python); with 4 workers the
    # fetches overlap the loop and each other: the loop waits for a quarter of a fetch per step
    # (and receives the batch from the worker's process: ~1.5 ms, test_taking_a_workers_batch...)
    assert inline > 5.0
    assert four < inline / 2
    # deterministic: every step to the ns, whatever order the OS delivered the workers' batches
    # in (the float difference of two clock reads carries the start time's rounding: compare ns)
    run(4)
    assert steps[4][0] == steps[4][1]


TAKE = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset

class Parts(Dataset):
    def __init__(self, k):
        self.k = k
    def __len__(self):
        return 64
    def __getitem__(self, i):
        return tuple(torch.full((256,), float(i + j)) for j in range(self.k))

k, pin = int(sys.argv[1]), sys.argv[2] == "pin"
it = iter(DataLoader(Parts(k), batch_size=8, num_workers=1, pin_memory=pin))
takes = []
for step in range(6):
    time.sleep(0.05)  # the worker is far ahead: the batch is ready when taken
    t0 = time.perf_counter_ns()
    batch = next(it)
    takes.append(time.perf_counter_ns() - t0)
print("take_ns", takes[-1], len(batch))
"""


def test_taking_a_workers_batch_costs_its_receiving():
    """A batch from a worker process is unpickled by the receiving thread, which fetches and
    maps each of its storages (hostcost.DATALOADER_IPC, measured with
    tools/holdout/dataloader_probe.py): the training thread pays it when pin_memory is off; with
    pinning, the pinning thread does and the loop pays only the queue."""
    from phantora_prof import hostcost
    from phantora_prof.runtime.host.dataloader import receive_ns

    c = hostcost.DATALOADER_IPC

    def take(k: int, pin: str) -> int:
        r = subprocess.run([sys.executable, "-m", "phantora_prof", "--no-trace", "python", "-c", TAKE, str(k), pin],
                           env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        line = next(line for line in r.stdout.splitlines() if line.startswith("take_ns")).split()
        assert int(line[2]) == k
        return int(line[1])

    one, nine = take(1, "nopin"), take(9, "nopin")
    # each of the k tensors is one stacked storage of 8 x 256 floats
    assert one >= receive_ns(1, 8 * 256 * 4)
    assert nine - one == receive_ns(9, 9 * 8 * 256 * 4) - receive_ns(1, 8 * 256 * 4)
    pinned = take(1, "pin")
    assert take(9, "pin") == pinned  # the storages are the pinning thread's work
    assert c["pinned_take_ns"] <= pinned < c["pinned_take_ns"] + 20_000  # plus __next__'s counted Python


def test_the_simulators_dataclass_methods_are_labelled_as_its_own_code():
    """dataclasses compiles __init__ & co. from a string ("<string>"): relabelled with the
    defining module's file, the host model's hook tells them from the program's Python (one
    more field in a message moved a DDP step by 26 ns before, counted as the program's work)."""
    import dataclasses

    from phantora_prof import protocol
    from phantora_prof.runtime.host import pyhost

    pyhost.own_generated_code()
    assert protocol.OpCall.__init__.__code__.co_filename == protocol.__file__
    assert protocol.TensorArg.__init__.__code__.co_filename == protocol.__file__
    # a dataclass of another package keeps its label
    @dataclasses.dataclass
    class Elsewhere:
        x: int

    assert Elsewhere.__init__.__code__.co_filename.startswith("<")
    assert protocol.OpCall(0, 1, "aten::mm", (), {}, (), 0, 0, 0, 7, 0).launch_wait_ns == 0  # still works


ENGINE = """
import torch
p = torch.ones(64, device="cuda", requires_grad=True)
q = torch.ones(64, device="cuda", requires_grad=True)
for _ in range(2):
    loss = ((p * 2 + q) * 3).sum()   # SumBackward0, MulBackward0, AddBackward0, MulBackward0, 2 x AccumulateGrad
    loss.backward()
torch.cuda.synchronize()
"""


def test_the_autograd_engine_hand_offs_cost_host_time(tmp_path):
    """`backward()` is charged the engine's graph task and thread hand-offs on the calling thread
    (runtime/host/autograd_engine.py): in the trace, the script thread's last op before the
    backward and the backward thread's first op are start_ns + start_per_node_ns * nodes apart,
    and the backward's end and the script thread's next op end_ns + end_per_node_ns * nodes."""
    import gzip
    import json

    import torch

    from phantora_prof import hostcost
    from phantora_prof.runtime.host.autograd_engine import graph_nodes

    p = torch.ones(3, requires_grad=True)
    q = torch.ones(3, requires_grad=True)
    y = ((p * 2 + q) * 3).sum()
    assert graph_nodes(y) == 6
    assert graph_nodes([y, y]) == 6  # shared nodes once
    assert graph_nodes(torch.autograd.graph.GradientEdge(y.grad_fn, 0)) == 6
    assert graph_nodes(torch.ones(2)) == 0

    (tmp_path / "engine.py").write_text(ENGINE)
    r = subprocess.run([sys.executable, "-m", "phantora_prof", "--out", str(tmp_path / "tr"), "python", "engine.py"],
                       cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    trace = json.load(gzip.open(tmp_path / "tr" / "rank0.pt.trace.json.gz"))
    ops = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: e["ts"])
    main = ops[0]["tid"]
    bwd = [e for e in ops if e["tid"] != main]
    assert bwd, "no backward thread ops"
    c = hostcost.AUTOGRAD_ENGINE
    first = bwd[0]
    before = max(e["ts"] + e["dur"] for e in ops if e["tid"] == main and e["ts"] < first["ts"])
    # the main thread's Python between its last op and the engine's entry is counted too: a few us at most
    gap_us = first["ts"] - before
    want_us = (c["start_ns"] + c["start_per_node_ns"] * 6) / 1e3
    assert want_us - 0.01 <= gap_us < want_us + 15
    nxt = min(e["ts"] for e in ops if e["tid"] == main and e["ts"] > first["ts"])  # the script thread's next op
    backward_end = max(e["ts"] + e["dur"] for e in bwd if e["ts"] < nxt)
    want_end_us = (c["end_ns"] + c["end_per_node_ns"] * 6) / 1e3
    assert want_end_us - 0.01 <= nxt - backward_end < want_end_us + 15


def test_a_batchs_storages_are_counted_through_any_mapping():
    """What crosses from a worker: one storage per distinct CPU tensor storage, found through any
    Mapping (HF's BatchEncoding is a UserDict), lists, tuples and named tuples; views count once."""
    import collections

    import torch

    from phantora_prof.runtime.host.dataloader import batch_storages

    a, b = torch.zeros(4, 8), torch.zeros(16, dtype=torch.long)
    Pair = collections.namedtuple("Pair", "x y")
    batch = collections.UserDict({"ids": b, "parts": [a, a[1:]], "pair": Pair(a.t(), "text"), "n": 3})
    assert batch_storages(batch) == (2, 4 * 8 * 4 + 16 * 8)
    assert batch_storages("no tensors") == (0, 0)


CPU_VIEWS = """
import time, torch
small, big = torch.randn(16, 1024), torch.randn(4096, 1024)  # 64 KiB, 16 MiB
rows = torch.tensor([3])

def per_call(f, n=20):
    t0 = time.perf_counter()
    for i in range(n):
        f(i)
    return (time.perf_counter() - t0) / n * 1e6

for name, f in [("select_small", lambda i: small[i % 16]), ("select_big", lambda i: big[i]),
                ("view_big", lambda i: big.view(-1)), ("t_big", lambda i: big.t()),
                ("index_small", lambda i: small[rows]), ("index_big", lambda i: big[rows]),
                ("clone_small", lambda i: small.clone()), ("clone_big", lambda i: big.clone())]:
    print(name, per_call(f))
"""


def test_a_view_of_a_cpu_tensor_moves_no_bytes(tmp_path):
    """CPU-tensor ops cost base + bytes moved (hostcost.cpu_op_ns): a view (`x[i]`, `view`, `t()`,
    what a TensorDataset's __getitem__ runs per sample) moves none whatever the tensor's size, a
    gather reads as much as it writes, a copy its whole input. Before, a view was charged its
    whole input: `x[i]` of a 16 MiB tensor cost ~0.7 ms and a DataLoader over a TensorDataset
    looked host-bound."""
    from phantora_prof import hostcost

    r = _run(CPU_VIEWS, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    us = {line.split()[0]: float(line.split()[1]) for line in r.stdout.splitlines() if len(line.split()) == 2}
    base_us = hostcost.CPU_OP_BASE_NS / 1e3
    for name in ("select_small", "select_big", "view_big", "t_big"):
        assert us[name] == pytest.approx(us["select_small"], rel=0.05) and us[name] < 2 * base_us, us
    assert us["index_big"] == pytest.approx(us["index_small"], rel=0.05), us
    copy_us = 2 * (16 << 20) / hostcost.CPU_OP_BYTES_PER_NS / 1e3  # reads and writes 16 MiB
    assert us["clone_big"] - us["clone_small"] == pytest.approx(copy_us, rel=0.1), us
