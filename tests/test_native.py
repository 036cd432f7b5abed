"""The native fake-CUDA device (native/fake_cuda.cpp) and its loader.

Everything that imports torch runs in a child process: the library must be loaded
before `import torch`, and this pytest process may already have torch imported.
The library is the one every simulation on this machine uses (the usual cache, built once
under its lock); a build from scratch by two racing processes is a slow test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import phantora_prof
from phantora_prof.errors import ConfigError, NativeBuildError
from phantora_prof.runtime.process import native_loader as nl

# Where `phantora_prof` comes from (repo checkout or installed copy): children use the same.
PKG_PARENT = str(Path(list(phantora_prof.__path__)[0]).resolve().parent)

TORCH_DIR = nl.find_torch_dir()
needs_cpu_torch = pytest.mark.skipif(nl.torch_is_cuda_build(TORCH_DIR),
                                     reason="torch is a CUDA build: the shim is never loaded")


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PKG_PARENT, env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def run_child(code: str, extra_env: dict[str, str] | None = None,
              timeout: float = 180) -> str:
    """Run `code` in a fresh interpreter; fail with its output if it exits non-zero."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=_child_env(extra_env), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"child failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _race_two_builds(cache: Path) -> dict:
    """Build the library into `cache` with two processes at once; what they reported."""
    env = _child_env({nl.ENV_CACHE_DIR: str(cache)})
    code = ("import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
            "from phantora_prof.runtime.process.native_loader import ensure_built\n"
            "print(ensure_built())\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"build failed:\n{out}\n{err}"
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1, paths
    return {"cache": cache, "lib": Path(paths.pop()),
            "builds": sum(err.count("building libphantora_fake_cuda.so") for _, err in outs)}


@pytest.fixture(scope="session")
def native_build():
    """The library as every simulation on this machine uses it: built once into the usual cache
    (under its lock), or found there. A fresh build racing another is test_concurrent_builds_build_once."""
    if nl.torch_is_cuda_build(TORCH_DIR):
        pytest.skip("torch is a CUDA build: the shim is never built")
    lib = nl.ensure_built()
    return {"cache": nl.cache_root().parent, "lib": lib}


# ---------------------------------------------------------------------------------------
# loader, without torch


def test_loader_never_imports_torch():
    out = run_child("""
        import sys
        from phantora_prof.runtime.process import native_loader as nl
        d = nl.find_torch_dir()
        assert (d / "version.py").exists(), d
        nl.torch_is_cuda_build(d); nl.torch_cxx11_abi(d); nl.find_native_sources()
        print("torch" in sys.modules)
    """)
    assert out.strip() == "False"


def test_torch_is_cuda_build_detection(tmp_path):
    cpu = tmp_path / "cpu"
    (cpu / "lib").mkdir(parents=True)
    (cpu / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n"
                                    "hip: Optional[str] = None\n")
    assert not nl.torch_is_cuda_build(cpu)
    cuda = tmp_path / "cuda"
    (cuda / "lib").mkdir(parents=True)
    (cuda / "version.py").write_text("__version__ = '2.13.0'\ncuda: Optional[str] = '12.8'\n")
    assert nl.torch_is_cuda_build(cuda)
    (cpu / "lib" / "libtorch_cuda.so").write_bytes(b"")
    assert nl.torch_is_cuda_build(cpu)


def test_load_on_cuda_build_loads_nothing(tmp_path, monkeypatch):
    fake = tmp_path / "torch"
    (fake / "lib").mkdir(parents=True)
    (fake / "version.py").write_text("__version__ = '2.13.0'\ncuda = '12.8'\n")
    monkeypatch.setattr(nl, "find_torch_dir", lambda: fake)
    monkeypatch.delenv(nl.ENV_DEVICE_COUNT, raising=False)
    assert nl.load_fake_cuda(8) is None
    assert nl.ENV_DEVICE_COUNT not in os.environ


@pytest.mark.parametrize("bad", [0, -1, 128, True, 2.0, "8"])
def test_invalid_device_count(bad):
    with pytest.raises(ConfigError, match="device_count"):
        nl.load_fake_cuda(bad)


@needs_cpu_torch
def test_missing_toolchain_is_one_clear_error(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv(nl.ENV_CACHE_DIR, str(tmp_path / "cache"))
    with pytest.raises(NativeBuildError) as info:
        nl.ensure_built()
    msg = str(info.value)
    assert "\n" not in msg
    assert "no C++ compiler" in msg and "apt-get install g++ cmake" in msg
    assert "pip install cmake" in msg


@needs_cpu_torch
def test_compile_error_reports_log_tail(tmp_path, monkeypatch):
    src = tmp_path / "src"
    (src / "native").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text((nl.find_native_sources() / "CMakeLists.txt").read_text())
    (src / "native" / "broken.cpp").write_text("int phantora_broken( {\n")
    monkeypatch.setattr(nl, "find_native_sources", lambda: src)
    monkeypatch.setenv(nl.ENV_CACHE_DIR, str(tmp_path / "cache"))
    with pytest.raises(NativeBuildError) as info:
        nl.ensure_built()
    msg = str(info.value)
    assert "full log: " in msg and "broken.cpp" in msg
    log_path = Path(msg.split("full log: ")[1].split("\n")[0])
    assert log_path.exists()
    # nothing half-built is left where a later call would pick it up
    assert not any(p.name.endswith(nl.LIB_NAME) for p in (tmp_path / "cache").rglob("*"))


@pytest.mark.slow  # a full native build (~30 s on 2 cores); the CMake build is tested by default
@needs_cpu_torch
def test_build_without_cmake_uses_compiler_directly(tmp_path, monkeypatch):
    import shutil

    real_which = shutil.which
    monkeypatch.setattr(nl.shutil, "which",
                        lambda name, *a, **k: None if name == "cmake" else real_which(name, *a, **k))
    monkeypatch.setenv(nl.ENV_CACHE_DIR, str(tmp_path / "cache"))
    lib = nl.ensure_built()
    info = json.loads((lib.parent / "build-info.json").read_text())
    assert info["cmake"] is None
    out = run_child(f"""
        import ctypes, os
        os.environ.pop("PHANTORA_DEVICE_COUNT", None)
        for n in ("libc10.so", "libtorch_cpu.so"):
            ctypes.CDLL(os.path.join({str(TORCH_DIR / 'lib')!r}, n), mode=ctypes.RTLD_GLOBAL)
        print(ctypes.CDLL({str(lib)!r}).phantora_fake_cuda_device_count())
    """)
    assert out.strip() == "8"  # the library's default


# ---------------------------------------------------------------------------------------
# build cache


@pytest.mark.slow  # a full CMake build from scratch (~50 s on 2 cores); the default run builds once, into the usual cache
@needs_cpu_torch
def test_concurrent_builds_build_once(tmp_path):
    built = _race_two_builds(tmp_path / "phantora-cache")
    assert built["builds"] == 1
    root = built["cache"] / "native"
    assert not list(root.glob("*.tmp-*")), "temporary build dirs left behind"
    info = json.loads((built["lib"].parent / "build-info.json").read_text())
    assert info["cxx11_abi"] == nl.torch_cxx11_abi(TORCH_DIR)


def test_build_is_cached(native_build, tmp_path, monkeypatch):
    lib = native_build["lib"]
    mtime = lib.stat().st_mtime_ns
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # a rebuild would fail: no tools on PATH
    assert nl.ensure_built() == lib
    assert lib.stat().st_mtime_ns == mtime


# ---------------------------------------------------------------------------------------
# the fake device, in children


def test_backward_with_autocast_on_fake_cuda(native_build):
    out = run_child("""
        from phantora_prof.runtime.process.native_loader import load_fake_cuda
        assert load_fake_cuda(8) is not None
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        # Python-level: a CPU build's torch.cuda.is_available() is False without asking
        # the hooks, and autocast('cuda') disables itself then (the runtime patches these).
        torch.cuda.is_available = lambda: True
        torch.cuda.is_bf16_supported = lambda *a, **k: True
        torch._C._set_only_lift_cpu_tensors(True)
        with FakeTensorMode(allow_non_fake_inputs=True):
            w = torch.randn(64, 64, device="cuda", requires_grad=True)
            x = torch.randn(8, 64, device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = x @ w
                assert h.dtype == torch.bfloat16, h.dtype
                y = h.float().pow(2).mean()
            y.backward()
            assert w.grad is not None and w.grad.device.type == "cuda"
            assert w.grad.shape == (64, 64)
            # another device: autograd's per-device threads and streams
            a = torch.randn(4, device="cuda:7", requires_grad=True)
            (a * 2).sum().backward()
            assert a.grad.device == torch.device("cuda:7")
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_device_count_streams_events_pinned(native_build):
    out = run_child("""
        import ctypes
        from phantora_prof.runtime.process.native_loader import load_fake_cuda
        lib = load_fake_cuda(3)
        assert load_fake_cuda(3) == lib  # idempotent
        import torch
        C = torch._C
        assert ctypes.CDLL(str(lib)).phantora_fake_cuda_device_count() == 3
        assert C._accelerator_hooks_device_count() == 3            # hooks
        assert torch.accelerator.current_accelerator().type == "cuda"
        torch.cuda._lazy_init = lambda: None   # Python-level; the runtime patches it
        # the guard: current device per thread, streams, events
        assert C._accelerator_getDeviceIndex() == 0
        C._accelerator_setDeviceIndex(2)
        assert C._accelerator_getDeviceIndex() == 2
        try:
            C._accelerator_setDeviceIndex(3)
            raise AssertionError("device 3 of 3 accepted")
        except RuntimeError as e:
            assert "invalid device ordinal" in str(e)
        C._accelerator_setDeviceIndex(0)
        assert C._accelerator_getStream(1).stream_id == 0            # default stream
        s1, s2 = torch.Stream(device="cuda"), torch.Stream(device="cuda:2")
        assert len({0, s1.stream_id, s2.stream_id}) == 3, (s1, s2)
        try:
            torch.Stream(device="cuda:3")
            raise AssertionError("stream on device 3 of 3 created")
        except RuntimeError:
            pass
        C._accelerator_setStream(s1)
        assert C._accelerator_getStream(0).stream_id == s1.stream_id
        e1 = torch.Event(device="cuda", enable_timing=True); e1.record(s1)
        e2 = torch.Event(device="cuda", enable_timing=True); e2.record(s1)
        s2.wait_event(e1)
        e2.synchronize(); s1.synchronize(); C._accelerator_synchronizeDevice(0)
        assert e1.query() and s1.query() and e1.elapsed_time(e2) == 0.0
        # pinned host memory: real host memory, reported as pinned
        t = torch.arange(10.0)
        p = t.pin_memory()
        assert p.is_pinned() and not t.is_pinned() and p.device.type == "cpu"
        assert torch.equal(p, t) and p[3:].is_pinned()
        assert torch.empty(4, pin_memory=True).is_pinned()
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_distributed_and_ddp_reducer(native_build):
    out = run_child("""
        from phantora_prof.runtime.process.native_loader import load_fake_cuda
        load_fake_cuda(2)
        import torch
        import torch.distributed as dist
        assert dist.is_available()
        from torch.testing._internal.distributed.fake_pg import FakeStore
        from torch._subclasses.fake_tensor import FakeTensorMode
        import torch.nn.parallel.distributed as ddp_mod
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
        # These read parameter data (fake tensors have none); the runtime handles them.
        ddp_mod._verify_param_shape_across_processes = lambda *a, **k: None
        ddp_mod._sync_module_states = lambda *a, **k: None
        with FakeTensorMode(allow_non_fake_inputs=True):
            m = torch.nn.Linear(16, 16, device="cuda")
            # The Reducer asks c10d::TimerRegistry for a CUDA timer; without one, the
            # second forward dies in Logger::set_runtime_stats_and_log (INTERNAL ASSERT).
            d = ddp_mod.DistributedDataParallel(m, device_ids=[0])
            for _ in range(3):
                d(torch.randn(4, 16, device="cuda"))
        dist.destroy_process_group()
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_load_after_import_torch_raises(native_build):
    out = run_child("""
        import torch
        from phantora_prof.errors import NativeBuildError
        from phantora_prof.runtime.process.native_loader import load_fake_cuda
        try:
            load_fake_cuda(2)
        except NativeBuildError as e:
            assert "before `import torch`" in str(e), e
            print("raised")
    """)
    assert out.strip() == "raised"


def test_library_default_and_invalid_env_count(native_build):
    code = f"""
        import ctypes, os
        for n in ("libc10.so", "libtorch_cpu.so"):
            ctypes.CDLL(os.path.join({str(TORCH_DIR / 'lib')!r}, n), mode=ctypes.RTLD_GLOBAL)
        print(ctypes.CDLL({str(native_build['lib'])!r}).phantora_fake_cuda_device_count())
    """
    assert run_child(code, {nl.ENV_DEVICE_COUNT: "0"}).strip() == "8"  # never 0
    assert run_child(code, {nl.ENV_DEVICE_COUNT: "16"}).strip() == "16"
