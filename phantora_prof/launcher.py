"""Start the coordinator and the rank processes for one simulated run, and write the results.

A rank process is `python -m phantora_prof.runtime.process.bootstrap <the user's command>` with the
environment torchrun would give it plus our own (coordinator address, rank config). The
user's stdout/stderr are inherited untouched; the CLI exits with the script's exit code.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phantora_prof.config import RunConfig
from phantora_prof.cost import get_gpu
from phantora_prof.cost.profiles import profile_for
from phantora_prof.engine.coordinator import Coordinator
from phantora_prof.engine.rank_timeline import RankTimeline
from phantora_prof.errors import ConfigError
from phantora_prof.protocol import ORIGIN_NS, SPAWN_QUIET_ENV, SPAWN_REQUEST_ENV
from phantora_prof.protocol import RankConfig
from phantora_prof import rank_forks

log = logging.getLogger(__name__)

PYTHON_NAMES = ("python", "python3")


@dataclass
class RankSummary:
    rank: int
    exit_code: int | None
    sim_time_ns: int  # until both the host and the GPUs are done
    gpu_busy_ns: int  # union of GPU work over streams and devices (<= sim_time_ns)
    ops: int
    kernels: int
    memcpys: int
    memsets: int
    trace_path: Path | None
    kernel_sources: dict[str, int] = field(default_factory=dict)  # GPU ns by where kernel times came from
    placeholders: int = 0  # data-dependent reads (.item() etc.) answered with placeholders
    peak_allocated: int = 0  # simulated GPU memory, bytes (torch.cuda.max_memory_allocated)
    peak_reserved: int = 0
    max_rss_bytes: int = 0  # resident memory of the rank process (the simulation's own cost)
    compile_ns: int = 0  # simulated host time spent compiling (torch.compile), inside sim_time_ns
    mirror_of: int | None = None  # a mirrored rank: the live rank whose simulation stands for it
    # the steps after the first optimizer step (RankTimeline.steady_window): start_ns, end_ns, steps,
    # per_step_ns, busy_ns, sources; None with fewer than two optimizer steps
    steady: dict | None = None


def _steady(tl: RankTimeline) -> dict | None:
    w = tl.steady_window()
    if w is None:
        return None
    return {"start_ns": w.start_ns - ORIGIN_NS, "end_ns": w.end_ns - ORIGIN_NS, "steps": w.steps,
            "per_step_ns": w.per_step_ns, "mean_step_ns": w.mean_step_ns, "busy_ns": w.busy_ns,
            "host_busy_ns": w.host_busy_ns,
            "sources": dict(w.sources)}


@dataclass
class RunResult:
    exit_code: int
    ranks: list[RankSummary]
    wall_s: float
    error: str | None = None  # why the simulation stopped early (mismatched collectives, a crashed rank)
    perfetto_path: Path | None = None
    report: dict | None = None
    report_error: str | None = None
    interrupted: int | None = None  # the signal (SIGTERM, SIGINT, ...) that stopped the run
    killed_by: int | None = None  # the signal that ended the script's process (exit_code is 128 + it)
    handled: bool = False  # interrupted, but every rank ended by itself (the script's own handler)
    output_errors: list[str] = field(default_factory=list)  # outputs that could not be written
    layout: Any = None  # engine.representatives.Layout when ranks were mirrored
    coordinator_max_rss_bytes: int = 0  # peak resident memory of this process (the coordinator)
    class_checks: list[str] = field(default_factory=list)  # checker ranks whose programs differ from their class


_UNITS_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_op_cost(spec: str) -> tuple[str, int]:
    """`aten::foo=35us` -> ("aten::foo", 35000). Units: ns, us, ms, s (default us)."""
    name, sep, value = spec.partition("=")
    name, value = name.strip(), value.strip().lower()
    if not sep or not name or not value:
        raise ConfigError(f"--op-cost expects NAME=TIME (e.g. mylib::rope=35us), got {spec!r}")
    if "::" not in name:
        name = f"aten::{name}"
    unit = next((u for u in ("ns", "us", "ms", "s") if value.endswith(u)), "")
    number = value[: len(value) - len(unit)] if unit else value
    try:
        ns = int(round(float(number) * _UNITS_NS[unit or "us"]))
    except ValueError:
        raise ConfigError(f"--op-cost {spec!r}: {number!r} is not a number") from None
    if ns <= 0:
        raise ConfigError(f"--op-cost {spec!r}: the time must be positive")
    return name, ns


_TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "--module", "-m"}
_TORCHRUN_VALUED = {"--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--node_rank", "--master-addr",
                    "--master_addr", "--master-port", "--master_port", "--rdzv-backend", "--rdzv_backend",
                    "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--rdzv-conf", "--rdzv_conf",
                    "--max-restarts", "--max_restarts", "--monitor-interval", "--monitor_interval", "--tee",
                    "--redirects", "--log-dir", "--log_dir", "--role", "--local-addr", "--local_addr",
                    "--start-method", "--start_method", "--local-ranks-filter", "--local_ranks_filter"}


class TorchrunHelp(Exception):
    """`phantora-prof torchrun --help`: the CLI prints how torchrun is run here."""


def torchrun_command(command: list[str]) -> tuple[int, int, list[str]]:
    """`torchrun [OPTIONS] SCRIPT ARGS` -> (nproc_per_node, nnodes, `python SCRIPT ARGS`)."""
    rest = list(command[1:])
    nproc, nnodes, module = 1, 1, False
    while rest and rest[0].startswith("-"):
        opt = rest.pop(0)
        name, eq, value = opt.partition("=")
        if name in ("-h", "--help"):
            raise TorchrunHelp
        if name in ("-m", "--module"):
            module = True
            continue
        if name in _TORCHRUN_FLAGS:
            continue
        if name not in _TORCHRUN_VALUED:
            raise ConfigError(f"torchrun option {name!r} is not supported by phantora-prof")
        if not eq:
            if not rest:
                raise ConfigError(f"torchrun option {name} needs a value")
            value = rest.pop(0)
        if name in ("--nproc-per-node", "--nproc_per_node"):
            if not value.isdigit():
                raise ConfigError(f"--nproc-per-node {value!r}: give a number of GPUs per node")
            nproc = int(value)
        elif name == "--nnodes":
            lo, _, hi = value.partition(":")
            nnodes = int(hi or lo)
    if not rest:
        raise ConfigError("torchrun needs a training script")
    py = [sys.executable, "-m", *rest] if module else [sys.executable, *rest]
    return nproc, nnodes, py


def python_argv(command: list[str]) -> list[str]:
    """The part of `python [args] ...` that the rank bootstrap runs (script/-m/-c and its args)."""
    exe = os.path.basename(command[0])
    if not (exe in PYTHON_NAMES or exe.startswith("python3.") or os.path.abspath(command[0]) == sys.executable):
        raise ConfigError(
            f"phantora-prof runs Python training scripts: expected `python SCRIPT ...`, "
            f"`python -m MODULE ...` or `python -c CODE`, got `{command[0]}`")
    rest = list(command[1:])
    # python's own flags that make sense here are accepted and ignored (-u) or rejected
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        flag = rest.pop(0)
        if flag not in ("-u", "-B", "-O", "-OO"):
            raise ConfigError(f"unsupported python option {flag!r} before the script")
    if not rest:
        raise ConfigError("`python` needs a script, -m MODULE or -c CODE")
    if rest[0] not in ("-m", "-c") and not os.path.exists(rest[0]):
        raise ConfigError(f"can't open file {rest[0]!r}: no such file")
    return rest


# sun_path holds 108 bytes on Linux (104 on macOS), its terminating NUL included
_SOCKET_PATH_MAX = 103
_SOCKET_NAME = "coordinator.sock"


def _socket_dir() -> str:
    """A new private directory for the coordinator's Unix socket.

    In the temporary directory ($TMPDIR) as usual; but a socket's path must fit `sun_path`,
    and a deep $TMPDIR (a batch scheduler's job directory, pytest-xdist's worker directories)
    does not: then in /tmp, the usual short one. The directory is removed when the run ends."""
    for base in (None, "/tmp"):
        if base is not None and not os.access(base, os.W_OK):
            continue
        d = tempfile.mkdtemp(prefix="phantora-", dir=base)
        if len(os.path.join(d, _SOCKET_NAME).encode()) <= _SOCKET_PATH_MAX:
            return d
        os.rmdir(d)
    raise ConfigError(f"the temporary directory {tempfile.gettempdir()!r} is too deep for a Unix socket's path "
                      f"(at most {_SOCKET_PATH_MAX} bytes) and /tmp is not writable: set TMPDIR to a shorter "
                      "directory")


def _max_rss_bytes() -> int:
    try:
        import resource

        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return 0
    return int(kib) * (1 if sys.platform == "darwin" else 1024)


# Developer aid: a command each rank process runs under, "{rank}" replaced by its rank, e.g.
# PHANTORA_RANK_WRAPPER="valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.{rank}"
# (tests/bench_runtime.py counts a rank's instructions per step so). Ranks then start as their
# own processes, not from the fork server.
RANK_WRAPPER_ENV = "PHANTORA_RANK_WRAPPER"


def _rank_wrapper(rank: int) -> list[str]:
    return [part.replace("{rank}", str(rank)) for part in shlex.split(os.environ.get(RANK_WRAPPER_ENV, ""))]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def _pump_output(stream, sink, prefix: str) -> None:
    """Copy a rank's output line by line with a `[rankN]: ` prefix (torchrun --tee style)."""
    try:
        for line in iter(stream.readline, b""):
            text = line.decode("utf-8", "replace")
            with _OUTPUT_LOCK:
                sink.write(prefix + text if text.endswith("\n") else prefix + text + "\n")
                sink.flush()
    except (OSError, ValueError):
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass


_OUTPUT_LOCK = threading.Lock()


def _stop(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """Terminate the rank processes still running (SIGTERM, then SIGKILL after a grace period)."""
    for p in procs:
        if p.poll() is None:
            try:
                p.terminate()
            except OSError:
                pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()


# How long the ranks have to end after the SIGTERM an interrupted run sends them, before SIGKILL:
# torchrun's (PContext.close's 30 s; also Slurm's default KillWait). A script whose own SIGTERM
# handler ends its loop and saves a checkpoint needs it: under the simulator the rest of its step
# and a large torch.save take real seconds, and 3 s left a truncated checkpoint file behind. A
# rank without a handler ends at once (bootstrap's default handler), and a second signal kills
# at once.
STOP_GRACE_S = 30.0

STOP_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGINT", None),
                                  getattr(signal, "SIGHUP", None)) if s is not None)


class _SignalStop:
    """While a run is on, SIGTERM / SIGINT / SIGHUP stop it cleanly: the coordinator stops the
    ranks (SIGTERM, then SIGKILL after a grace period; a second signal kills them at once) and
    the traces of what was simulated until then are written. The handler only sets flags; a
    second signal while the traces are written stops the writing."""

    def __init__(self) -> None:
        self.coord: Coordinator | None = None
        self.signum: int | None = None
        self.serving = True
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _SignalStop:
        if threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                try:
                    self._old[s] = signal.signal(s, self._handle)
                except (ValueError, OSError):
                    pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)

    def _handle(self, signum: int, frame: Any) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if self.serving:
            if self.coord is not None:
                self.coord.request_stop(signum)
        elif not first:
            raise KeyboardInterrupt  # a second signal while the traces are written: stop writing


def run(config: RunConfig, on_progress=None) -> RunResult:
    """Run the command under the simulator: start the coordinator and the ranks, serve them
    until they end (or a signal stops them), write the traces."""
    with _quiet_collector(), _SignalStop() as stopper:
        if config.cluster.world_size != 1:
            return _run(config, on_progress, stopper)
        with tempfile.TemporaryDirectory(prefix="phantora-spawn-") as tmp:
            request = Path(tmp) / "nprocs"
            result = _run(config, on_progress, stopper, {SPAWN_REQUEST_ENV: str(request)})
            nprocs = _spawn_request(request)
        if nprocs is None or stopper.signum is not None:
            return result
        # the script started its own ranks with torch.multiprocessing.spawn: run it as that many
        log.info("the script starts %d processes with torch.multiprocessing.spawn: simulating %d ranks",
                 nprocs, nprocs)
        gpus = config.cluster.gpus_per_node
        cluster = dataclasses.replace(config.cluster, nproc_per_node=nprocs,
                                      gpus_per_node=max(gpus, nprocs) if gpus is not None else None)
        relaunch = _run(dataclasses.replace(config, cluster=cluster), on_progress, stopper, {SPAWN_QUIET_ENV: "1"})
        relaunch.wall_s += result.wall_s
        return relaunch


def _spawn_request(path: Path) -> int | None:
    """The number of processes a single-rank run asked for with torch.multiprocessing.spawn
    (runtime/patches/mp_spawn.py), or None."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 1 else None


# Python's cyclic collector runs every 700 net allocations; the coordinator allocates millions of
# long-lived objects (ops, spans, flows) and the collector walked them over and over: 1,298
# collections, 0.82 s of a 12 s single-rank gpt.py run (4 steps, traces on). Frozen start-up
# objects and a first-generation threshold of 100,000: 5 collections, 0.13 s. Cycles are still
# collected; the simulated results do not depend on it (the ranks have their own policy).
COORDINATOR_GC_THRESHOLD = (100_000, 50, 100)


@contextlib.contextmanager
def _quiet_collector():
    """The coordinator's collector policy for the length of a run (restored after: `run` is
    also called inside other programs, the tests among them)."""
    import gc

    from phantora_prof.engine import collector

    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*COORDINATOR_GC_THRESHOLD)
    try:
        with collector.freezing_policy():
            yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def torchrun_env(config: RunConfig) -> bool:
    """Whether the rank processes get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
    MASTER_ADDR, TORCHELASTIC_RUN_ID, ...): when the command was torchrun's or the run has more
    than one rank. `phantora-prof python train.py` alone is `python train.py`, whose environment
    has none of them; scripts and frameworks read their presence as "launched distributed"
    (accelerate and HF Trainer initialised an NCCL process group and reported MULTI_GPU, so the
    script's own init_process_group failed with 'initialize the default process group twice';
    nanoGPT's `int(os.environ.get('RANK', -1)) != -1` took its DDP path)."""
    return config.torchrun or config.cluster.world_size > 1


def _run(config: RunConfig, on_progress, stopper: _SignalStop, extra_env: dict[str, str] | None = None) -> RunResult:
    cluster, kernel_times, outputs = config.cluster, config.kernel_times, config.outputs
    argv = python_argv(list(config.command))
    gpu = get_gpu(cluster.gpu)
    if kernel_times.mode == "measure":
        from phantora_prof.measure.source import check_can_measure

        check_can_measure(kernel_times.db, gpu.key)  # a clear error before any rank starts
    world = cluster.world_size
    per_node = cluster.nproc_per_node
    if outputs.trace:
        from phantora_prof.outputs import clear_previous_outputs

        clear_previous_outputs(Path(outputs.out_dir))  # the directory holds this run's traces only
    epoch_ns = time.time_ns()
    t0 = time.monotonic()
    sock_dir = _socket_dir()
    base_env = dict(os.environ)
    base_env.pop("PHANTORA_RANK_CONFIG", None)
    # Hash-randomized iteration order (sets, dicts of str keys) changes how much Python a rank
    # runs, which is counted as host time (runtime/host/pyhost.py): one fixed seed unless the user set one.
    base_env.setdefault("PYTHONHASHSEED", "0")
    # transformers (>= 5) swaps layers for compiled CUDA kernels fetched from the Hugging Face Hub
    # when the `kernels` package is installed (`from_pretrained(device_map=...)`): binaries no
    # simulated device can load, and a download that fails offline ("kernels-community/rotary ...
    # not available"). The simulated run keeps the model's own PyTorch layers unless the user says.
    base_env.setdefault("USE_HUB_KERNELS", "0")
    for name in (SPAWN_REQUEST_ENV, SPAWN_QUIET_ENV):
        base_env.pop(name, None)
    base_env.update(dict(config.env))
    base_env.update(extra_env or {})

    host_records = outputs.trace or outputs.report_dir is not None  # host op records are written

    def timeline(rank: int) -> RankTimeline:
        props = [gpu.device_properties(i) for i in range(cluster.node_gpus)]
        tl = RankTimeline(rank, host_pid=100 + rank, device_properties=props, num_sms=gpu.num_sms,
                          base_time_ns=epoch_ns - ORIGIN_NS, profile=profile_for(gpu))
        tl.keep_host_spans = host_records
        return tl

    def model():
        from phantora_prof.engine.collectives import NetsimModel

        return NetsimModel(gpu.key, cluster.nnodes, per_node, cluster.network)

    coord = Coordinator(world, sock_dir, timeline, collective_timeout_s=config.collective_timeout_s,
                        model_factory=model)
    stopper.coord = coord
    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    master_port = base_env.get("MASTER_PORT") if world == 1 else None
    master_port = master_port or str(_free_port())
    run_id = uuid.uuid4().hex[:8]
    error: str | None = None
    representative = cluster.representative
    coord.representative = representative
    coord.requested = cluster.trace_ranks
    coord.class_check = cluster.class_check
    rank_of_proc: list[int] = []
    with_torchrun_env = torchrun_env(config)

    def start_rank(rank: int) -> None:
        local = rank % per_node
        cfg = RankConfig(rank=rank, world_size=world, local_rank=local, device_count=cluster.node_gpus,
                         gpu=gpu.key, op_costs=dict(kernel_times.op_costs), kernel_times=kernel_times.mode,
                         kernel_db=str(kernel_times.db) if kernel_times.db else None,
                         host_python=config.host.count_python, representative=representative,
                         host_records=host_records)
        env = dict(base_env)
        env.update({
            "PHANTORA_COORDINATOR": coord.address,
            "PHANTORA_RANK_CONFIG": cfg.to_env(),
            "PHANTORA_EPOCH_NS": str(epoch_ns),
            "PHANTORA_HOST_PROFILE": config.host.profile,
            "PHANTORA_LOG_LEVEL": config.log_level,
            "PHANTORA_CLI_PID": str(os.getpid()),
        })
        if with_torchrun_env:
            env.update({
                "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(rank // per_node), "ROLE_RANK": str(rank),
                "ROLE_WORLD_SIZE": str(world), "ROLE_NAME": "default", "NODE_RANK": str(rank // per_node),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": master_port,
                "TORCHELASTIC_RUN_ID": run_id, "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0", "GLOO_SOCKET_IFNAME": base_env.get("GLOO_SOCKET_IFNAME", "lo"),
            })
        cmd = [*_rank_wrapper(rank), sys.executable, "-m", "phantora_prof.runtime.process.bootstrap", *argv]
        if world == 1:
            procs.append(subprocess.Popen(cmd, env=env))
        else:
            env["PYTHONUNBUFFERED"] = "1"
            p = _forked(env) or subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            procs.append(p)
            for stream, sink in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
                # children started by the script's own mp.spawn print as they would: no prefix
                prefix = "" if SPAWN_QUIET_ENV in base_env else f"[rank{rank}]: "
                t = threading.Thread(target=_pump_output, args=(stream, sink, prefix), daemon=True)
                t.start()
                pumps.append(t)
        rank_of_proc.append(rank)

    forks: list[Any] = []  # the fork server of this run's ranks (rank_forks.py), once started

    def _forked(env: dict[str, str]) -> Any:
        """The rank forked by the fork server, or None: one rank, PHANTORA_NO_FORK_SERVER=1, or
        a server that failed (the rank then starts as its own process and reports what failed)."""
        if world == 1 or not rank_forks.enabled() or forks == [None] or os.environ.get(RANK_WRAPPER_ENV):
            return None
        try:
            if not forks:
                # the host profile is read when the server preloads the cost modules, once for every rank
                server_env = {**base_env, "PYTHONUNBUFFERED": "1", "PHANTORA_HOST_PROFILE": config.host.profile}
                forks.append(rank_forks.ForkServer(cluster.node_gpus, server_env, gpu.key))
            return forks[0].start(argv, env)
        except (OSError, RuntimeError) as exc:
            log.warning("rank fork server unavailable (%s): ranks start as their own processes", exc)
            forks[:] = [None]
            return None

    def spawn(ranks: list[int]) -> None:
        for rank in ranks:
            if stopper.signum is None:  # interrupted: start no more ranks
                start_rank(rank)

    coord.spawn = spawn
    try:
        # representative ranks: rank 0 alone probes the layout; the coordinator starts the other
        # live ranks when it knows them (engine/representatives.py)
        spawn([0] if representative else list(range(world)))
        if stopper.signum is not None:
            coord.request_stop(stopper.signum)
        coord.serve(procs, on_progress=on_progress, rank_of_proc=rank_of_proc, stop_grace_s=STOP_GRACE_S)
        stopper.serving = False
        if coord.stop_signal is not None:
            _stop(procs, grace_s=0.0)
        elif coord.error is not None:
            error = str(coord.error)
            _stop(procs)
        elif coord.failed_rank is not None:
            _stop(procs)
            error = (f"rank {coord.failed_rank} exited with code "
                     f"{procs[rank_of_proc.index(coord.failed_rank)].returncode}; "
                     "the other ranks were stopped")
        codes_of = {rank_of_proc[i]: p.wait() for i, p in enumerate(procs)}
        codes = [codes_of.get(r) for r in range(world)]  # None: never started (mirrored, or interrupted)
    finally:
        stopper.serving = False
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for t in pumps:
            t.join(timeout=5)
        if forks and forks[0] is not None:
            forks[0].close()
        shutil.rmtree(sock_dir, ignore_errors=True)

    from phantora_prof.outputs import kept_traces, write_traces

    paths: dict[int, Path] = {}
    perfetto_path = None
    kept: dict = {}
    output_errors: list[str] = []
    if outputs.trace:
        try:
            paths, perfetto_path, kept = write_traces(
                coord, world, epoch_ns, outputs.out_dir, outputs.trace_format,
                keep=outputs.report_dir is not None and outputs.trace_format == "perfetto")
        except OSError as exc:  # checked before the run; the disk can still fill up or go away
            output_errors.append(f"the traces could not be written to {outputs.out_dir}: {exc}")
    elif outputs.report_dir is not None:
        kept = kept_traces(coord, world, epoch_ns)
    summaries = []
    layout = coord.layout
    for rank in range(world):
        res = coord.ranks.get(rank)
        if res is None:
            summaries.append(RankSummary(rank, codes[rank], 0, 0, 0, 0, 0, 0, None))
            continue
        tl = res.timeline
        path = paths.get(rank)
        end = tl.end_ns()  # host and GPUs done: work still queued at exit counts (RankTimeline.end_ns)
        goodbye = res.goodbye.summary if res.goodbye else {}
        summaries.append(RankSummary(
            rank, codes[rank], max(0, end - ORIGIN_NS), tl.gpu_busy_ns(), tl.stats.ops, tl.stats.kernels,
            tl.stats.memcpys, tl.stats.memsets, path, dict(tl.stats.estimated_ops),
            placeholders=int(goodbye.get("placeholders", 0)), peak_allocated=int(goodbye.get("peak_allocated", 0)),
            peak_reserved=int(goodbye.get("peak_reserved", 0)), max_rss_bytes=int(goodbye.get("max_rss_bytes", 0)),
            compile_ns=int(goodbye.get("compile_ns", 0)), steady=_steady(tl)))
    if layout is not None:  # mirrored ranks: their representative's figures
        for i, summ in enumerate(summaries):
            rep = layout.rep_of(summ.rank)
            if rep != summ.rank and rep in coord.ranks:
                summaries[i] = dataclasses.replace(summaries[rep], rank=summ.rank, trace_path=None, mirror_of=rep)
    # the signal may have reached the ranks first (a scheduler signals the whole job): they
    # ended, the coordinator reported a failed rank, and our handler ran just after
    interrupted = coord.stop_signal if coord.stop_signal is not None else stopper.signum
    started = [c for c in codes if c is not None]
    # 128 + the signal: ended by it (a script's unhandled KeyboardInterrupt exits 130, as python does)
    handled = (interrupted is not None and bool(started) and coord.error is None
               and all(c >= 0 and c != 128 + interrupted for c in started))
    if handled:
        # every rank ended by itself (the script's own SIGTERM handler stopped it cleanly, or it
        # had finished): its exit status, as `python` run directly would have given
        exit_code = next((c for c in started if c != 0), 0)
        error = None
    elif interrupted is not None:
        exit_code = 128 + interrupted  # the shell's convention for a process ended by a signal
        if coord.error is None:
            error = None  # not "rank N exited with code -15": the run was stopped
    elif coord.error is not None:
        exit_code = 1
    elif coord.failed_rank is not None:
        exit_code = codes[coord.failed_rank] or 1
    else:
        exit_code = next((c for c in codes if c not in (0, None)), 0)
    killed_by = None
    if exit_code < 0:  # the script's process was ended by a signal (its own os.kill, the OOM killer)
        killed_by = -exit_code
        exit_code = 128 + killed_by  # what the shell reports for `python` ended by that signal
    result = RunResult(exit_code, summaries, time.monotonic() - t0, error, perfetto_path=perfetto_path,
                       interrupted=interrupted, handled=handled, output_errors=output_errors, layout=layout,
                       killed_by=killed_by)
    result.coordinator_max_rss_bytes = _max_rss_bytes()
    if layout is not None:
        from phantora_prof.engine.representatives import check

        result.class_checks = check(layout, {r: (res.timeline.stats.ops, res.timeline.stats.kernels)
                                             for r, res in coord.ranks.items()})
    if outputs.report_dir is not None:
        from phantora_prof.report import ReportError, write_report

        memory = {}
        for rank, res in coord.ranks.items():
            memory[rank] = [((t - ORIGIN_NS) / 1e6, a, r) for t, _d, a, r in res.timeline.memory.samples()]
        try:
            result.report = write_report(result, kept or None, outputs.report_dir, gpu=cluster.gpu, memory=memory)
        except (ReportError, ValueError, OSError) as exc:
            result.report_error = str(exc)
    return result
