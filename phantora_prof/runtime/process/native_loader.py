"""Build and load the native fake-CUDA device (``libphantora_fake_cuda.so``).

A CPU-only torch build has no CUDA device guard and no CUDA hooks, so autograd aborts on
fake CUDA tensors. ``native/fake_cuda.cpp`` registers both (and a c10d timer for DDP).
It must be loaded with ``RTLD_GLOBAL`` after torch's ``libc10.so``/``libtorch_cpu.so`` and
**before** ``import torch`` (torch caches its CUDA hooks on first use).

This module must never import torch (it runs before torch is imported). Usage in a rank
process, first thing::

    from phantora_prof.runtime.process.native_loader import load_fake_cuda
    load_fake_cuda(device_count=8)   # None on CUDA builds of torch: nothing to fake
    import torch

Where things live:

- sources: ``<repo>/CMakeLists.txt`` + ``<repo>/native/`` in a source checkout, else the
  same layout copied into the installed package at ``phantora_prof/native_src/``;
- builds: ``$PHANTORA_CACHE_DIR/native/<torch-version>-<hash>/`` (default cache dir
  ``~/.cache/phantora-prof``, or ``$XDG_CACHE_HOME/phantora-prof``); the hash covers the
  native sources, torch's git version and the C++ ABI, so editing a source or changing
  torch rebuilds, and everything else reuses the build.

C++ ABI: the library must be compiled with torch's ``_GLIBCXX_USE_CXX11_ABI``. Without
importing torch we read it from ``libc10.so``: a CXX11-ABI build exports symbols
mangled with ``std::__cxx11`` (``B5cxx11``/``__cxx11``), an old-ABI build has none.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from phantora_prof.cache_paths import ENV_CACHE_DIR, cache_base
from phantora_prof.errors import ConfigError, NativeBuildError
from phantora_prof.runtime.process.clock import real_sleep

log = logging.getLogger(__name__)

LIB_NAME = "libphantora_fake_cuda.so"
ENV_DEVICE_COUNT = "PHANTORA_DEVICE_COUNT"
MAX_DEVICE_COUNT = 127  # c10::DeviceIndex is int8_t
# Marker that identifies our CMakeLists.txt (so an unrelated <site-packages>/CMakeLists.txt
# is never mistaken for a source tree).
_CMAKE_MARKER = "phantora_fake_cuda"
_SOURCE_SUFFIXES = (".cpp", ".cc", ".h", ".hpp")
_INSTALL_HINT = (
    "install a C++ compiler and CMake, e.g. `apt-get install g++ cmake` "
    "(Debian/Ubuntu), `dnf install gcc-c++ cmake` (Fedora) or "
    "`conda install -c conda-forge cxx-compiler cmake`; "
    "CMake alone can also come from `pip install cmake`"
)

_loaded: dict[str, object] = {}  # state of this process: path, count, handles


# ---------------------------------------------------------------------------------------
# torch, without importing it


def find_torch_dir() -> Path:
    """Directory of the installed ``torch`` package, found without importing it."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError) as exc:  # ValueError: torch.__spec__ is None
        raise NativeBuildError(f"cannot locate the torch package: {exc}") from exc
    if spec is None:
        raise NativeBuildError("torch is not installed in this Python environment "
                               f"({sys.executable}); `pip install torch`")
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]).resolve()
    if spec.origin:
        return Path(spec.origin).resolve().parent
    raise NativeBuildError("cannot locate the torch package directory")


def _version_py_field(torch_dir: Path, name: str) -> str | None:
    """Value of ``name = '...'`` in torch/version.py (None if absent or None)."""
    try:
        text = (torch_dir / "version.py").read_text()
    except OSError:
        return None
    m = re.search(rf"^{name}\s*(?::[^=]*)?=\s*(.+?)\s*$", text, re.MULTILINE)
    if not m:
        return None
    value = m.group(1).strip()
    if value == "None":
        return None
    return value.strip("'\"")


def torch_version(torch_dir: Path) -> str:
    version = _version_py_field(torch_dir, "__version__")
    if version:
        return version
    try:
        from importlib.metadata import version as dist_version

        return dist_version("torch")
    except Exception:  # noqa: BLE001 - any failure means "unknown"
        return "unknown"


def torch_is_cuda_build(torch_dir: Path) -> bool:
    """True if this torch has a real GPU backend (CUDA, or ROCm which poses as CUDA).

    Such a build already registers a CUDA guard and hooks, so the shim must not be loaded
    (even on a machine with no GPU). Decided from torch/version.py (``cuda``/``hip`` not
    None) and, as a backstop, the presence of libtorch_cuda.so / libtorch_hip.so.
    """
    torch_dir = Path(torch_dir)
    if _version_py_field(torch_dir, "cuda") or _version_py_field(torch_dir, "hip"):
        return True
    lib = torch_dir / "lib"
    return any((lib / name).exists() for name in ("libtorch_cuda.so", "libtorch_hip.so"))


def torch_cxx11_abi(torch_dir: Path) -> bool:
    """torch's ``_GLIBCXX_USE_CXX11_ABI``, read from libc10.so's symbol names."""
    libc10 = Path(torch_dir) / "lib" / "libc10.so"
    try:
        data = libc10.read_bytes()
    except OSError as exc:
        raise NativeBuildError(f"cannot read {libc10}: {exc}") from exc
    return b"__cxx11" in data or b"B5cxx11" in data


# ---------------------------------------------------------------------------------------
# sources and cache


def _is_source_root(root: Path) -> bool:
    cml = root / "CMakeLists.txt"
    try:
        return (root / "native").is_dir() and _CMAKE_MARKER in cml.read_text()
    except OSError:
        return False


def find_native_sources() -> Path:
    """The directory holding CMakeLists.txt and native/: the repo, else package data."""
    here = Path(__file__).resolve()
    candidates = [
        here.parents[3],  # source checkout: <repo>/phantora_prof/runtime/process/native_loader.py
        here.parents[2] / "native_src",  # installed: phantora_prof/native_src/
    ]
    for root in candidates:
        if _is_source_root(root):
            return root
    raise NativeBuildError(
        "the native sources of phantora-prof are missing (looked in "
        + ", ".join(str(c) for c in candidates)
        + "); reinstall phantora-prof")


def _source_files(src_root: Path) -> list[Path]:
    files = [src_root / "CMakeLists.txt"]
    files += sorted(p for p in (src_root / "native").rglob("*")
                    if p.is_file() and p.suffix in _SOURCE_SUFFIXES)
    return files


def _build_key(src_root: Path, torch_dir: Path, abi: bool) -> str:
    h = hashlib.sha256()
    for path in _source_files(src_root):
        h.update(path.relative_to(src_root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    h.update(f"git={_version_py_field(torch_dir, 'git_version')};abi={int(abi)}".encode())
    version = re.sub(r"[^A-Za-z0-9.+_-]", "_", torch_version(torch_dir))
    return f"{version}-{h.hexdigest()[:16]}"


def cache_root() -> Path:
    return cache_base() / "native"


# ---------------------------------------------------------------------------------------
# building


def _find_cxx() -> str | None:
    cxx = os.environ.get("CXX")
    if cxx:
        found = shutil.which(cxx)
        if found:
            return found
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(cmd: list[str], log_file, cwd: Path | None = None) -> None:
    log_file.write(f"$ {' '.join(cmd)}\n")
    log_file.flush()
    proc = subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, cwd=cwd,
                          timeout=900)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def _build_with_cmake(cmake: str, cxx: str, src_root: Path, torch_dir: Path, abi: bool,
                      out_dir: Path, log_file) -> None:
    build_dir = out_dir / "build"
    cmd = [cmake, "-S", str(src_root), "-B", str(build_dir),
           f"-DTORCH_DIR={torch_dir}", f"-DPHANTORA_CXX11_ABI={'ON' if abi else 'OFF'}",
           f"-DCMAKE_CXX_COMPILER={cxx}", "-DCMAKE_BUILD_TYPE=Release",
           f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}"]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    _run(cmd, log_file)
    _run([cmake, "--build", str(build_dir), "-j", str(min(2, os.cpu_count() or 1))],
         log_file)
    shutil.rmtree(build_dir, ignore_errors=True)


def _build_with_cxx(cxx: str, src_root: Path, torch_dir: Path, abi: bool, out_dir: Path,
                    log_file) -> None:
    """Fallback when CMake (or make/ninja) is missing: one compiler invocation."""
    sources = [str(p) for p in _source_files(src_root) if p.suffix in (".cpp", ".cc")]
    lib = torch_dir / "lib"
    _run([cxx, "-std=c++20", "-O2", "-DNDEBUG", "-fPIC", "-shared",
          f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}",
          "-isystem", str(torch_dir / "include"),
          "-isystem", str(torch_dir / "include" / "torch" / "csrc" / "api" / "include"),
          *sources, "-o", str(out_dir / LIB_NAME),
          "-Wl,--no-as-needed", f"-L{lib}", f"-Wl,-rpath,{lib}", "-lc10", "-ltorch_cpu"],
         log_file)


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def ensure_built(torch_dir: Path | None = None) -> Path:
    """Path of the fake-CUDA library for this torch, building it on first use.

    Safe to call from many processes at once: one builds (under a file lock, into a
    temporary directory renamed into place), the others wait and reuse its result.
    """
    torch_dir = Path(torch_dir).resolve() if torch_dir else find_torch_dir()
    src_root = find_native_sources()
    abi = torch_cxx11_abi(torch_dir)
    key = _build_key(src_root, torch_dir, abi)
    root = cache_root()
    final_dir = root / key
    lib_path = final_dir / LIB_NAME
    if lib_path.exists():  # fast path: a finished build is renamed into place atomically
        return lib_path

    cxx = _find_cxx()
    if cxx is None:
        raise NativeBuildError(
            "cannot build phantora's fake-CUDA library (needed with a CPU-only torch): "
            f"no C++ compiler found on PATH (looked for $CXX, c++, g++, clang++); {_INSTALL_HINT}")
    cmake = shutil.which("cmake")
    if cmake and not (shutil.which("ninja") or shutil.which("make")):
        cmake = None  # CMake cannot build without a build tool; compile directly

    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # blocks while another process builds
        if lib_path.exists():
            return lib_path
        log_path = root / f"{key}.build.log"
        tmp_dir = Path(tempfile.mkdtemp(prefix=f"{key}.tmp-", dir=root))
        os.chmod(tmp_dir, 0o755)  # mkdtemp makes it private; the cache may be shared
        t0 = time.monotonic()
        log.info("building %s (torch %s, %s) ...", LIB_NAME, torch_version(torch_dir),
                 "cmake" if cmake else os.path.basename(cxx))
        try:
            with open(log_path, "w") as log_file:
                if cmake:
                    _build_with_cmake(cmake, cxx, src_root, torch_dir, abi, tmp_dir, log_file)
                else:
                    _build_with_cxx(cxx, src_root, torch_dir, abi, tmp_dir, log_file)
            if not (tmp_dir / LIB_NAME).exists():
                raise FileNotFoundError(f"the build produced no {LIB_NAME}")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise NativeBuildError(
                f"building phantora's fake-CUDA library failed ({exc}); "
                f"full log: {log_path}\n--- last lines ---\n{_log_tail(log_path)}") from exc
        seconds = time.monotonic() - t0
        shutil.copy(log_path, tmp_dir / "build.log")
        (tmp_dir / "build-info.json").write_text(json.dumps({
            "torch_dir": str(torch_dir), "torch_version": torch_version(torch_dir),
            "cxx11_abi": abi, "sources": str(src_root), "compiler": cxx,
            "cmake": cmake, "seconds": round(seconds, 2)}, indent=1))
        if final_dir.exists():  # a damaged earlier build (library deleted): replace it
            shutil.rmtree(final_dir)
        os.rename(tmp_dir, final_dir)  # atomic: readers see all of it or nothing
        log.info("built %s in %.1f s", lib_path, seconds)
        return lib_path


# ---------------------------------------------------------------------------------------
# loading


def _let_autograd_device_threads_settle(seconds: float = 0.02) -> None:
    """Give autograd's per-device threads the GIL once more before Python finalizes.

    Backward of a cuda tensor runs on autograd's device thread, and that thread drops its
    last reference to the finished GraphTask just *after* backward() has returned in the
    caller. Under FakeTensorMode the task's thread-local state holds Python objects (the
    mode), so dropping it needs the GIL. If the script exits right after backward(), that
    thread can ask for the GIL while the interpreter is finalizing; CPython then
    pthread_exit()s it inside a noexcept destructor and the process aborts with
    "terminate called without an active exception" (seen in ~1 of 8 runs). Sleeping
    releases the GIL so a waiting thread finishes first (0 of 30 runs with this). A real
    sleep: the simulated clock must not move at exit.
    """
    real_sleep(seconds)


def loaded_library() -> ctypes.CDLL | None:
    """The loaded fake-CUDA library (ctypes handle), or None when none is loaded."""
    handles = _loaded.get("handles")
    return handles[-1] if handles else None  # type: ignore[index]


def load_fake_cuda(device_count: int) -> Path | None:
    """Load the fake-CUDA device with ``device_count`` devices; call before ``import torch``.

    Returns the library's path, or None on CUDA/ROCm builds of torch (nothing is loaded
    there: the real CUDA runtime is present and must be left alone). Loading twice in a
    process with the same count is a no-op.
    """
    if isinstance(device_count, bool) or not isinstance(device_count, int) \
            or not 1 <= device_count <= MAX_DEVICE_COUNT:
        raise ConfigError(f"device_count must be an integer in [1, {MAX_DEVICE_COUNT}], "
                          f"got {device_count!r}")
    torch_dir = find_torch_dir()
    if torch_is_cuda_build(torch_dir):
        log.debug("torch at %s is a CUDA build: fake-CUDA library not loaded", torch_dir)
        return None
    if _loaded:
        if _loaded["count"] != device_count:
            raise NativeBuildError(
                f"the fake-CUDA library is already loaded with {_loaded['count']} devices; "
                f"cannot change to {device_count} in the same process")
        return _loaded["path"]  # type: ignore[return-value]
    if "torch" in sys.modules:
        raise NativeBuildError(
            "the fake-CUDA library must be loaded before `import torch` (torch caches its "
            "CUDA hooks at import), but torch is already imported in this process; call "
            "load_fake_cuda() first thing in the process")

    lib_path = ensure_built(torch_dir)
    os.environ[ENV_DEVICE_COUNT] = str(device_count)  # read by the library at load time
    torch_lib = torch_dir / "lib"
    try:
        handles = [ctypes.CDLL(str(torch_lib / name), mode=ctypes.RTLD_GLOBAL)
                   for name in ("libc10.so", "libtorch_cpu.so")]
        shim = ctypes.CDLL(str(lib_path), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise NativeBuildError(f"loading {lib_path} failed: {exc}; delete "
                               f"{lib_path.parent} to force a rebuild") from exc
    reported = shim.phantora_fake_cuda_device_count()
    if reported != device_count:
        raise NativeBuildError(
            f"{lib_path} reports {reported} devices, expected {device_count} (was it "
            "loaded earlier in this process with another PHANTORA_DEVICE_COUNT?)")
    _loaded.update(path=lib_path, count=device_count, handles=handles + [shim])
    # Registered first, so it runs last among atexit handlers (they run in reverse).
    atexit.register(_let_autograd_device_threads_settle)
    log.debug("loaded %s with %d fake CUDA devices", lib_path, device_count)
    return lib_path


def route_sdp_choice() -> bool:
    """Give scaled_dot_product_attention's backend-choice stub its CUDA entry (native/sdp_choice.cpp);
    False when the library is not loaded in this process (a CUDA build, or no simulator)."""
    handles = _loaded.get("handles")
    if not handles:
        return False
    return bool(handles[-1].phantora_route_sdp_choice())
