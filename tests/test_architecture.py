"""The package boundaries of DESIGN.md, enforced on the source (issue #20).

- no import cycles between modules (imports inside functions included: a lazy import that
  closes a circle is still a circle, it only hides it from the interpreter);
- `tracing/` and `netsim/` import neither torch nor `phantora_prof`;
- `phantora_prof/cost/` imports no torch (it runs in the coordinator and in tools);
- the launcher, the CLI and what they run in the coordinator process import no runtime module
  (the rank side): what both sides share lives in `protocol.py`;
- the device-side measuring scripts (`phantora_prof/measure/`: the kernel sweeps, the timing
  harness, the measuring worker) run on a bare GPU machine from a checkout: everything they
  import, transitively and through the packages' `__init__`s, is the standard library or torch;
- no code reaches another folder of the repository through `sys.path` (the calibration steps
  are modules of `phantora_prof/calibrate/`, the device scripts of `phantora_prof/measure/`).

Imports are read from the syntax tree, not by importing. `from pkg import name` depends on
`pkg.name` when that is a module, else on `pkg` (its `__init__`); a module depending on its
own package's `__init__` through a submodule import is how packages work, not a cycle.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("phantora_prof", "netsim", "tracing")
# measure/ is the device side but for source.py, the coordinator's link to the worker
DEVICE_SIDE = ("phantora_prof.measure",)
DEVICE_SIDE_EXCEPT = ("phantora_prof.measure.source",)
DEVICE_LIBRARIES = {"torch", "torchgen"}  # torchgen ships in torch's wheel
COORDINATOR_SIDE = ("phantora_prof.cli", "phantora_prof.launcher", "phantora_prof.execute", "phantora_prof.outputs",
                    "phantora_prof.summary", "phantora_prof.protocol", "phantora_prof.engine")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = f
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> modules of ours it imports, plus 'torch' when it imports torch."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                subs = [f"{src}.{a.name}" for a in node.names if f"{src}.{a.name}" in mods]
                attrs = [a for a in node.names if f"{src}.{a.name}" not in mods]
                targets = subs + ([src] if attrs or not subs else [])
            for t in targets:
                if t.split(".")[0] == "torch":
                    graph[name].add("torch")
                    continue
                while t and t not in mods:  # `import a.b.c` of an attribute path: its module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def _cycles(graph: dict[str, set[str]], mods) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in mods:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(mods):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    mods = _modules()
    assert _cycles(_imports(mods), mods) == []


def test_libraries_import_neither_torch_nor_the_application():
    mods = _modules()
    graph = _imports(mods)
    bad = {m: sorted(t for t in graph[m] if t == "torch" or t.startswith("phantora_prof"))
           for m in mods if m.split(".")[0] in ("tracing", "netsim")}
    assert {m: v for m, v in bad.items() if v} == {}


def test_cost_models_import_no_torch():
    mods = _modules()
    graph = _imports(mods)
    assert [m for m in mods if m.startswith("phantora_prof.cost") and "torch" in graph[m]] == []


def test_coordinator_side_imports_no_rank_runtime():
    mods = _modules()
    graph = _imports(mods)
    bad = {m: sorted(t for t in graph[m] if t.startswith("phantora_prof.runtime"))
           for m in mods if m.startswith(COORDINATOR_SIDE)}
    assert {m: v for m, v in bad.items() if v} == {}


def test_the_checker_sees_cycles_and_torch(tmp_path):
    """The rules are not vacuous: a planted cycle and a torch import are found."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import torch\ndef f():\n    from pkg import b\n")
    b.write_text("from pkg.a import f\n")
    mods = {"pkg.a": a, "pkg.b": b}
    graph = _imports(mods)
    assert graph["pkg.a"] == {"torch", "pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert _cycles(graph, mods) == [["pkg.a", "pkg.b"]]


def test_schema_argument_table_is_fresh():
    """cost/data/aten_arg_positions.json is what `phantora-prof calibrate schema-args` makes
    from the installed torch (it stands in for torch's schemas so that cost/ needs no torch)."""
    import json

    from phantora_prof.calibrate import schema_args

    shipped = json.loads(schema_args.TABLE.read_text())
    assert schema_args.stale(schema_args.build(), shipped) == []


def _defined_names(path: Path) -> set[str]:
    """Names a module binds at its top level (defs, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, (ast.If, ast.Try)):
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def test_every_import_of_our_modules_resolves():
    """`from phantora_prof.x import y` names a module or something x defines: imports inside
    functions run only when their path does, so a stale one (a module moved to another
    package) would otherwise surface in some rank process far from its cause."""
    mods = _modules()
    bad = []
    for name, path in sorted(mods.items()):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.split(".")[0] not in PACKAGES:
                continue
            if node.module not in mods:
                bad.append(f"{name}:{node.lineno}: no module {node.module}")
                continue
            defined = None
            for a in node.names:
                if a.name == "*" or f"{node.module}.{a.name}" in mods:
                    continue
                defined = defined if defined is not None else _defined_names(mods[node.module])
                if a.name not in defined:
                    bad.append(f"{name}:{node.lineno}: {node.module} has no {a.name}")
    assert bad == []


def _external(path: Path) -> set[str]:
    """Top-level names of what a module imports from outside the repository's packages."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return {n for n in out if n not in PACKAGES}


def _with_packages(name: str, mods: dict[str, Path]) -> list[str]:
    """The module and the packages whose __init__ importing it runs."""
    parts = name.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if p in mods]


def test_device_scripts_import_only_torch_and_the_standard_library():
    mods = _modules()
    graph = _imports(mods)
    device = sorted(m for m in mods if m.startswith(DEVICE_SIDE) and not m.startswith(DEVICE_SIDE_EXCEPT))
    assert {"phantora_prof.measure.measure_kernels", "phantora_prof.measure.timing", "phantora_prof.measure.replay",
            "phantora_prof.measure.sweep_families", "phantora_prof.measure.capture_real"} <= set(device)
    bad = {}
    for start in device:
        seen, todo = set(), _with_packages(start, mods)
        while todo:
            m = todo.pop()
            if m in seen:
                continue
            seen.add(m)
            for t in graph.get(m, ()):
                if t != "torch":
                    todo += _with_packages(t, mods)
        outside = {f"{m}: {n}" for m in seen for n in _external(mods[m])
                   if n not in sys.stdlib_module_names and n not in DEVICE_LIBRARIES}
        if outside:
            bad[start] = sorted(outside)
    assert bad == {}
    assert "numpy" in _external(mods["phantora_prof.calibrate.host"])  # the rule sees third-party imports


def test_no_sys_path_reaching_into_the_repository():
    """Code of the packages imports the repository's modules as modules, not by putting a folder
    of the checkout on sys.path (the one sys.path edit left is capture_real's, which runs the
    user's script as `python SCRIPT` would)."""
    offenders = []
    for name, path in _modules().items():
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if "sys.path.insert" in line or "sys.path.append" in line:
                offenders.append(f"{name}:{i}")
    assert offenders == ["phantora_prof.measure.capture_real:" + str(_line_of(
        ROOT / "phantora_prof" / "measure" / "capture_real.py", "sys.path.insert(0, str(Path(script)"))]


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)
