"""Entry point of a rank process: `python -m phantora_prof.runtime.process.bootstrap SCRIPT ARGS...`
(or `-m MODULE ARGS...`, or `-c CODE ARGS...`).

Order of events: load the native fake-CUDA library (CPU builds of torch only) before torch
is imported, import torch, install the interception runtime, connect to the coordinator,
then run the user's program exactly as `python` would: same sys.argv, sys.path[0],
`__main__`, exceptions and exit code. Whatever happens, the buffered messages are flushed
and the coordinator is told how the program ended.
"""
from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback

# What main() runs after the host model starts counting is charged to the program: imports
# belong up here (runtime/host/pyhost.py). Neither imports torch.
from phantora_prof.runtime.patches import mp_spawn


def _parse(argv: list[str]) -> tuple[str, str, list[str]]:
    if not argv:
        raise SystemExit("phantora-prof: nothing to run (expected SCRIPT, -m MODULE or -c CODE)")
    if argv[0] == "-m":
        if len(argv) < 2:
            raise SystemExit("phantora-prof: -m needs a module name")
        return "module", argv[1], [argv[1]] + argv[2:]
    if argv[0] == "-c":
        if len(argv) < 2:
            raise SystemExit("phantora-prof: -c needs code")
        return "code", argv[1], ["-c"] + argv[2:]
    return "path", argv[0], argv


def _run_user(kind: str, target: str, argv: list[str]) -> None:
    sys.argv = argv
    if kind == "path":
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        with _runpy_uncounted():
            runpy.run_path(target, run_name="__main__")
    elif kind == "module":
        sys.path[0] = os.getcwd()
        with _runpy_uncounted():
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = ""
        code = compile(target, "<string>", "exec")
        import __main__

        exec(code, __main__.__dict__)  # noqa: S102 - this is `python -c`


@contextlib.contextmanager
def _runpy_uncounted():
    """runpy's own Python (finding the script's importer, building its module) is not counted
    as the program's host time: `python script.py` runs none of it, and how much of it runs
    depends on the environment (sys.path_hooks of an editable install). Counting resumes when
    runpy hands the script's code to exec (this file's frames count as the program's)."""
    from phantora_prof.runtime.process import state as _state

    host = _state.get().pyhost if _state.installed() else None
    if host is None:
        yield
        return
    native = host.native
    orig = runpy._run_code

    def run_code(*args, **kwargs):
        native.resume()
        try:
            return orig(*args, **kwargs)
        finally:
            native.pause()

    runpy._run_code = run_code
    native.pause()
    try:
        yield
    finally:
        native.resume()
        runpy._run_code = orig


def _op_cpu_profile() -> None:
    """Developer aid (`PHANTORA_OP_CPU=PATH`, runtime/process/op_cpu.py). Set up at import, not
    in main(): main()'s own bytecodes after the host model starts counting are charged to the
    program, so adding any there would move every trace by a few ns."""
    from phantora_prof.runtime.process import op_cpu

    path = os.environ.get(op_cpu.ENV)
    if path:
        op_cpu.install(path)


_op_cpu_profile()


def main() -> None:
    kind, target, argv = _parse(sys.argv[1:])
    from phantora_prof.runtime.process.state import RankConfig

    config = RankConfig.from_env()
    _setup_logging(config.rank)
    from phantora_prof.runtime.process import native_loader

    native_loader.load_fake_cuda(config.device_count)
    from phantora_prof.runtime.process import install

    from phantora_prof.errors import PhantoraError

    try:
        runtime = install.install(config)
    except PhantoraError as exc:  # a setup the simulator cannot run: one clear line, no traceback
        print(f"phantora-prof: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    _stop_with_the_cli(runtime)
    _freeze_startup_objects()
    exit_code = 0
    from phantora_prof.runtime.process import self_profile

    profiler = self_profile.from_env(config.rank)  # developer aid: where does the simulation's own time go?
    if profiler is not None:
        runtime.state.self_profile = profiler
        profiler.start()
    try:
        _run_user(kind, target, argv)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            exit_code = 0
        elif isinstance(code, int):
            exit_code = code
        else:
            print(code, file=sys.stderr)
            exit_code = 1
    except KeyboardInterrupt:
        _print_user_traceback()  # as python prints it (no frame of ours: interrupts.py's handler)
        exit_code = 130
    except BaseException:  # noqa: BLE001 - the user's exception, reported as python would
        _print_user_traceback()
        exit_code = 1
    finally:
        if profiler is not None:
            runtime.state.self_profile = None
            profiler.stop_and_write()
        mp_spawn.release_at_exit()
        _flush_std_streams()
        runtime.finish(exit_code)
    if os.environ.get("PHANTORA_FULL_FINALIZE"):
        sys.exit(exit_code)
    _exit_without_finalizing(exit_code)


def _freeze_startup_objects() -> None:
    """Leave the objects of the start-up (torch, torch._dynamo and the runtime: ~300,000 of them)
    out of the cyclic collector's full passes. They live as long as the process anyway; walking
    them made the first full collection in a rank cost ~0.15 s (the first large allocation burst,
    e.g. loading the cost data) and every later one as much. Not freed either way, so the script
    sees no difference; the collector's work is not counted as host time."""
    import gc

    gc.collect()
    gc.freeze()


def _exit_without_finalizing(exit_code: int) -> None:
    """End the rank as `python` would, minus the interpreter's teardown.

    Finalizing an interpreter that imported torch and torch._dynamo (FakeTensorMode imports
    it) takes ~1 s of CPU: every module's objects are freed one by one. What a script can
    observe of that teardown is kept: its non-daemon threads are waited for, its atexit
    handlers run (logging's shutdown, multiprocessing's worker clean-up, weakref.finalize
    callbacks), and files it left open are closed, as their finalizers would. Other objects'
    __del__ methods are not called at exit (CPython does not promise that either).
    PHANTORA_FULL_FINALIZE=1 exits the normal way."""
    import atexit
    import threading

    try:
        threading._shutdown()  # wait for the script's non-daemon threads, as Py_Finalize does first
    except BaseException:  # noqa: BLE001 - e.g. KeyboardInterrupt while waiting: exit anyway
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - reported by atexit itself, as at a normal exit
        pass
    _close_open_files()
    _flush_std_streams()
    os._exit(exit_code)


def _flush_std_streams() -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed or broken stream: nothing more to save
        pass


def _close_open_files() -> None:
    """Close the file objects the script left open, as their finalizers would at a normal exit
    (a text or gzip file written and never closed keeps its last lines and its trailer):
    outer layers first (text, then buffered and compressed, then raw), the standard streams
    left alone. `_io._IOBase` is the C base of every file class: the check stays cheap over
    the heap's objects (gc.get_objects leaves out the start-up objects frozen before the script
    ran, `_freeze_startup_objects`; the script's files are made after)."""
    import _io
    import gc

    std = set()
    for stream in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__):
        std.add(id(stream))
        std.add(id(getattr(stream, "buffer", None)))
        std.add(id(getattr(getattr(stream, "buffer", None), "raw", None)))
    layers: tuple[list, list, list] = ([], [], [])
    for obj in gc.get_objects():
        kind = type(obj)  # not isinstance(): it reads obj.__class__, which some objects compute (and warn)
        if issubclass(kind, _io._IOBase) and id(obj) not in std:
            layer = 0 if issubclass(kind, _io._TextIOBase) else 1 if issubclass(kind, _io._BufferedIOBase) else 2
            layers[layer].append(obj)
    for objs in layers:
        for obj in objs:
            try:
                if not obj.closed:
                    obj.close()
            except Exception:  # noqa: BLE001 - a broken stream loses nothing more than before
                pass


def _stop_with_the_cli(runtime) -> None:
    """A rank ends when the CLI that started it ends, as a torchrun worker does.

    SIGTERM (the CLI sends it when it is interrupted) ends the process as its default action
    would, after sending the coordinator what was captured so far, so the traces hold the run
    up to the signal. A script that installs its own SIGTERM handler replaces this one. If the
    CLI itself is killed (SIGKILL), the kernel sends SIGTERM here (Linux's parent-death
    signal), so no rank is left running."""
    import _signal
    import signal

    def on_sigterm(signum, frame):
        runtime.abort(signum)
        _signal.signal(signum, int(signal.SIG_DFL))
        os.kill(os.getpid(), signum)

    # through _signal, the C module: the stdlib's Python wrapper would be counted as the
    # script's host time (bootstrap.py's frames count as the program's, runtime/host/pyhost.py)
    _signal.signal(int(signal.SIGTERM), on_sigterm)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
            if os.environ.get("PHANTORA_CLI_PID", str(os.getppid())) != str(os.getppid()):
                os.kill(os.getpid(), signal.SIGTERM)  # the CLI was gone before the call
        except (OSError, AttributeError):
            pass


def _setup_logging(rank: int) -> None:
    """Our own messages go to stderr with a prefix, never mixed into the script's stdout."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[phantora-prof rank {rank}] %(levelname)s: %(message)s"))
    logger = logging.getLogger("phantora_prof")
    logger.addHandler(handler)
    logger.setLevel(os.environ.get("PHANTORA_LOG_LEVEL", "WARNING").upper())
    logger.propagate = False
    # FakeTensorMode logs a traceback whenever an op's shape function raises; on the simulated
    # GPU that exception becomes the op's own error (the RuntimeError a CUDA build raises, or a
    # clear UnsupportedOpError), so the ~20 lines of torch internals before it say nothing more
    logging.getLogger("torch._subclasses.fake_tensor").addFilter(
        lambda record: not str(record.msg).startswith("failed while attempting to run meta"))


def _print_user_traceback() -> None:
    """Print the traceback as `python script.py` would show it: without the frames of our
    bootstrap before the script, nor those of the simulation runtime (an error raised inside
    the simulated GPU, e.g. OutOfMemoryError, points at the user's line that caused it)."""
    mp_spawn.release_at_exit()  # a relaunched mp.spawn rank's held-back output first
    etype, value, tb = sys.exc_info()
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../phantora_prof
    runpy_file = runpy.__file__.rstrip("c")

    def ours(filename: str) -> bool:
        return (os.path.abspath(filename).startswith(package + os.sep) or filename.rstrip("c") == runpy_file
                or filename == "<frozen runpy>")

    def torch_wrapper(filename: str) -> bool:
        # the dispatch-mode wrappers torch puts around our handler (not there in a real run)
        return filename.endswith(os.path.join("torch", "_compile.py")) or \
            filename.endswith(os.path.join("torch", "_dynamo", "eval_frame.py"))

    exc = traceback.TracebackException(etype, value, tb)
    frames = [f for f in exc.stack if not ours(f.filename)]
    while frames and torch_wrapper(frames[-1].filename):
        frames.pop()
    exc.stack = traceback.StackSummary.from_list(frames)
    sys.stderr.write("".join(exc.format()))


if __name__ == "__main__":
    main()
