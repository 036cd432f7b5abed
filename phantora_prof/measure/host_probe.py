"""How fast is this host at what training loops do on the CPU? (issue #15: the reference host)

    python -m phantora_prof.measure.host_probe --out host.json [--reps 5]

Times, on the machine it runs on, (1) Python workloads of different shapes (function calls,
methods and objects, comprehensions, string work, torch's Python API on CPU tensors), each
with its count of Python-level and C-level calls (sys.setprofile 'call' / 'c_call' events,
counted in a second, untimed run), and (2) aten ops on CPU tensors over sizes. No GPU needed.
Run on the GPU machine's host it characterizes the reference host; run here it says how this
machine compares. phantora-prof's host model (phantora_prof/cost/data/host_model.json, hosts/*.json)
is fitted from these numbers.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch


# ---------------------------------------------------------------- Python workloads

def _fib(n):
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


class _Node:
    __slots__ = ("v", "nxt")

    def __init__(self, v, nxt=None):
        self.v, self.nxt = v, nxt

    def total(self):
        return self.v + (self.nxt.total() if self.nxt is not None else 0)


class _Hooky:
    """Attribute access, properties, kwargs, *args: what framework code is made of."""

    def __init__(self):
        self._x = 1
        self.cfg = {"a": 1, "b": 2}

    @property
    def x(self):
        return self._x

    def call(self, *args, scale=1, **kw):
        return sum(args) * scale + len(kw) + self.x


def py_calls():
    return _fib(20)


def py_objects():
    head = None
    for i in range(300):
        head = _Node(i, head)
    return sum(head.total() for _ in range(30))


def py_framework():
    h = _Hooky()
    acc = 0
    for i in range(20000):
        acc += h.call(i, 1, 2, scale=2, tag="x") + h.cfg.get("a", 0)
        if isinstance(acc, int) and hasattr(h, "cfg"):
            acc %= 1000003
    return acc


def py_comprehensions():
    acc = 0
    for _ in range(60):
        d = {f"k{i}": i * i for i in range(500)}
        acc += sum(v for k, v in d.items() if v % 3 == 0)
        acc += len([x for x in sorted(d.values(), reverse=True)[:100]])
    return acc


def py_strings():
    out = []
    for i in range(20000):
        out.append(f"step {i} loss {i * 0.001:.4f} lr {3e-4:.2e}".split()[1])
    return len(",".join(out))


def torch_meta_api():
    t = torch.zeros(4, 8, 16)
    acc = 0
    for _ in range(5000):
        acc += t.shape[0] * t.size(1) + t.dim() + t.numel() + t.stride(0) + int(t.is_contiguous())
        acc += len(t.shape) + t.element_size()
    return acc


def torch_small_ops():
    a, b = torch.ones(4), torch.ones(4)
    for _ in range(3000):
        a = a + b
        a.mul_(0.5)
    return float(a[0])


def module_calls():
    m = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(20)])
    x = torch.zeros(1)
    for _ in range(500):
        x = m(x)
    return x.numel()


PY_WORKLOADS = {f.__name__: f for f in (py_calls, py_objects, py_framework, py_comprehensions, py_strings,
                                        torch_meta_api, torch_small_ops, module_calls)}


def count_calls(fn) -> dict:
    counts = {"call": 0, "c_call": 0}

    def prof(frame, event, arg):
        if event in counts:
            counts[event] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return {"py_calls": counts["call"], "c_calls": counts["c_call"]}


def time_fn(fn, reps: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    return statistics.median(ts)


# ---------------------------------------------------------------- aten ops on CPU tensors

def cpu_ops(reps: int) -> list[dict]:
    out = []
    sizes = [1, 64, 4096, 1 << 16, 1 << 20, 1 << 24]
    for n in sizes:
        x = torch.rand(n)
        y = torch.rand(n)
        xi = torch.randint(0, 100, (n,))
        idx = torch.randint(0, n, (min(n, 4096),))
        cases = {
            "add": lambda: torch.add(x, y),
            "mul_": lambda: x.mul_(1.0),
            "to_bf16": lambda: x.to(torch.bfloat16),
            "sum": lambda: x.sum(),
            "cat": lambda: torch.cat((x, y)),
            "stack": lambda: torch.stack((x, y)),
            "index_select": lambda: x.index_select(0, idx),
            "clone": lambda: x.clone(),
            "long_add": lambda: xi + 1,
            "zeros": lambda: torch.zeros(n),
            "arange": lambda: torch.arange(n),
        }
        inner = max(1, min(2000, (1 << 22) // max(n, 1)))
        for name, fn in cases.items():
            def loop(fn=fn):
                for _ in range(inner):
                    fn()
            t = time_fn(loop, reps) / inner
            out.append({"op": name, "numel": n, "ns": round(t, 1)})
    for n in (8, 64, 512):
        lst = list(range(n))
        def from_list(lst=lst):
            for _ in range(200):
                torch.tensor(lst)
        out.append({"op": "tensor_from_list", "numel": n, "ns": round(time_fn(from_list, reps) / 200, 1)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)  # a training loop's main thread; intra-op threads would blur per-op costs
    res = {"host": {"python": sys.version.split()[0], "torch": torch.__version__, "machine": platform.machine(),
                    "processor": platform.processor(), "cpu_count": __import__("os").cpu_count()},
           "python": {}, "cpu_ops": []}
    for name, fn in PY_WORKLOADS.items():
        rec = {"ns": time_fn(fn, a.reps), **count_calls(fn)}
        res["python"][name] = rec
        print(f"{name:18s} {rec['ns'] / 1e6:8.2f} ms  py {rec['py_calls']:7d}  c {rec['c_calls']:7d}", flush=True)
    res["cpu_ops"] = cpu_ops(a.reps)
    try:
        with open("/proc/cpuinfo") as f:
            res["host"]["model_name"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"-> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
