"""Unit tests of rank-side pieces that need no subprocess: clock, options, argument rendering."""
from __future__ import annotations

import datetime
import time
import timeit  # noqa: F401 - see below

import pytest

from phantora_prof.engine.kineto_args import shape_args
from phantora_prof.errors import ConfigError
from phantora_prof.launcher import parse_op_cost, python_argv
from phantora_prof.protocol import TensorArg
from phantora_prof.runtime.process import clock as clock_mod
from phantora_prof.runtime.device.allocator import AllocatorModel, round_size, segment_size

# The clock tests below patch time.* for a while. A module first imported in that window keeps
# what it bound by name for good (timeit.default_timer = time.perf_counter, which numba's
# compiler events use): a later test in this process that compiles netsim's kernels then read a
# clock that was gone. So those modules are imported here, before any patching.
import netsim.flowsim  # noqa: E402,F401


def test_virtual_clock_drives_python_clocks():
    saved = {n: getattr(time, n) for n in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time",
                                            "time_ns", "sleep", "process_time", "process_time_ns", "thread_time",
                                            "thread_time_ns")}
    saved_dt = datetime.datetime
    try:
        c = clock_mod.VirtualClock(epoch_ns=1_700_000_000_000_000_000)
        clock_mod.install(c)
        t0 = time.perf_counter()
        n0 = time.perf_counter_ns()
        c.advance(1_500_000)  # 1.5 ms
        assert time.perf_counter() - t0 == pytest.approx(0.0015)
        assert time.perf_counter_ns() - n0 == 1_500_000
        assert time.monotonic_ns() == c.now_ns
        assert time.time_ns() == 1_700_000_000_000_000_000 + 1_500_000
        assert datetime.datetime.now().timestamp() == pytest.approx(1_700_000_000.0015)
        time.sleep(2.0)  # takes simulated time, not real time
        assert c.elapsed_ns() == 2_001_500_000
        c.advance_to(c.now_ns - 5)  # never goes backwards
        assert c.elapsed_ns() == 2_001_500_000
    finally:
        for n, f in saved.items():
            setattr(time, n, f)
        datetime.datetime = saved_dt
        clock_mod._installed = None  # later tests (and engine code in this process) see no clock
        clock_mod._real.clear()
        clock_mod._installed = None
        clock_mod._real.clear()


def test_lock_polling_waits_do_not_move_the_simulated_clock(tmp_path):
    """filelock's polling sleeps wait for real (another rank holds the lock); a script's own
    sleep still takes simulated time. Regression: 8 torchtitan ranks preparing a fresh
    `datasets` cache made step 1 take 12-17 simulated seconds, varying run to run."""
    import fcntl
    import threading

    filelock = pytest.importorskip("filelock")
    saved = {n: getattr(time, n) for n in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time",
                                            "time_ns", "sleep", "process_time", "process_time_ns", "thread_time",
                                            "thread_time_ns")}
    saved_dt = datetime.datetime
    path = tmp_path / "cache.lock"
    held, release = threading.Event(), threading.Event()

    def holder():
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # another open file: conflicts like another process
            held.set()
            release.wait(10)
            fcntl.flock(f, fcntl.LOCK_UN)

    try:
        c = clock_mod.VirtualClock()
        clock_mod.install(c)
        real_mono = clock_mod._real["monotonic"]
        t = threading.Thread(target=holder)
        t.start()
        assert held.wait(10)
        threading.Timer(0.3, release.set).start()
        r0 = real_mono()
        with filelock.FileLock(str(path), timeout=-1).acquire(poll_interval=0.02):
            pass
        t.join()
        assert real_mono() - r0 >= 0.25  # it really waited ...
        assert c.elapsed_ns() == 0  # ... and the simulated clock stood still
        time.sleep(0.5)  # the script's own sleep is simulated
        assert c.elapsed_ns() == 500_000_000
    finally:
        for n, f in saved.items():
            setattr(time, n, f)
        datetime.datetime = saved_dt
        clock_mod._installed = None
        clock_mod._real.clear()


def test_python_argv_forms(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    assert python_argv(["python", str(script), "--lr", "1"]) == [str(script), "--lr", "1"]
    assert python_argv(["python3", "-u", "-m", "pkg.train", "x"]) == ["-m", "pkg.train", "x"]
    assert python_argv(["python", "-c", "print(1)"]) == ["-c", "print(1)"]
    with pytest.raises(ConfigError, match="expected `python SCRIPT"):
        python_argv(["bash", "x.sh"])
    with pytest.raises(ConfigError, match="no such file"):
        python_argv(["python", str(tmp_path / "missing.py")])
    with pytest.raises(ConfigError, match="unsupported python option"):
        python_argv(["python", "-X", "dev", str(script)])


def test_run_config_validates_itself(tmp_path):
    from phantora_prof.config import ClusterConfig, HostConfig, KernelTimesConfig, OutputConfig, RunConfig

    with pytest.raises(ConfigError, match="no command"):
        RunConfig(command=())
    with pytest.raises(ConfigError):
        ClusterConfig(gpu="v100")
    with pytest.raises(ConfigError, match="at least 1"):
        ClusterConfig(nproc_per_node=0)
    with pytest.raises(ConfigError, match="--nnodes"):
        ClusterConfig(nproc_per_node=2, nnodes=0)
    with pytest.raises(ConfigError, match="--kernel-times"):
        KernelTimesConfig(mode="guess")
    with pytest.raises(ConfigError, match="--format"):
        OutputConfig(trace_format="pdf")
    with pytest.raises(ConfigError):
        HostConfig(profile="no-such-host")
    with pytest.raises(ConfigError, match="--collective-timeout"):
        RunConfig(command=("python", "x.py"), collective_timeout_s=0)
    cfg = RunConfig(command=("python", "x.py"), cluster=ClusterConfig(nproc_per_node=4, nnodes=2))
    assert cfg.cluster.world_size == 8
    assert cfg.cluster.network == "dgx-h200"  # the GPU's own network, resolved
    # a measuring run keeps its kernels in the user's cache, per GPU model; changes are validated
    measured = cfg.with_changes(kernel_times={"mode": "measure"})
    assert measured.kernel_times.db is not None and measured.kernel_times.db.name == "kernels-h200.json.gz"
    with pytest.raises(ConfigError, match="at least 1"):
        cfg.with_changes(cluster={"nnodes": 0})


def test_parse_op_cost_units():
    assert parse_op_cost("mylib::rope=35us") == ("mylib::rope", 35_000)
    assert parse_op_cost("rope=2ms") == ("aten::rope", 2_000_000)
    assert parse_op_cost("x::y=100") == ("x::y", 100_000)
    assert parse_op_cost("x::y=250ns") == ("x::y", 250)
    for bad in ("x::y", "x::y=", "=1us", "x::y=abcus", "x::y=-1us"):
        with pytest.raises(ConfigError):
            parse_op_cost(bad)


def test_shape_args_match_kineto_conventions():
    t = TensorArg((8, 4), (4, 1), "bfloat16", 0)
    out = shape_args((t, (t, t), 1, 0.5, True, None, (1.0, 2.0)))
    assert out["Input Dims"] == [[8, 4], [[8, 4], [8, 4]], [], [], [], [], []]  # lists: each tensor's shape
    assert out["Input type"] == ["c10::BFloat16", "TensorList", "Scalar", "Scalar", "Scalar", "", "ScalarList"]
    assert out["Input Strides"][0] == [4, 1] and out["Input Strides"][1] == [[4, 1], [4, 1]]
    assert shape_args(((t,) * 31,))["Input Dims"] == [[]]  # longer than torch.profiler shows
    assert out["Concrete Inputs"][2:5] == ["1", "0.5", "True"]
    # doubles as c10 prints an IValue: integral ones with a trailing point (SDPA's dropout_p "0."
    # in the H200 traces, autograd's pow(x, 1.)), others with 17 significant digits
    assert out["Concrete Inputs"][6] == "[1., 2.]"
    assert shape_args((0.0, -0.0, 1e-5, 1e12))["Concrete Inputs"] == ["0.", "-0.", "1.0000000000000001e-05",
                                                                     "1000000000000"]


def test_allocator_rounding_and_caching():
    assert round_size(1) == 512 and round_size(513) == 1024
    assert segment_size(512) == 2 << 20 and segment_size(2 << 20) == 20 << 20
    assert segment_size(11 << 20) == 12 << 20
    m = AllocatorModel(capacity=80 << 30)
    a = m.allocate(100)
    b = m.allocate(3 << 20)
    assert m.allocated == 512 + (3 << 20)
    assert m.reserved == (2 << 20) + (20 << 20)
    m.free(b)
    assert m.allocated == 512 and m.reserved == (2 << 20) + (20 << 20)  # cached, still reserved
    m.allocate(3 << 20)  # reuses the cached block
    assert m.reserved == (2 << 20) + (20 << 20)
    assert m.peak_allocated == 512 + (3 << 20)
    m.free(3 << 20)
    m.free(a)
    m.empty_cache()
    assert m.reserved == 0 and m.allocated == 0


def test_cuda_build_simulates_only_the_gpus_it_sees():
    """A CUDA build of torch has no fake device guard: more simulated GPUs per node than real
    ones must be a clear start-up error, not 'invalid device ordinal' at the first op."""
    from phantora_prof.errors import ConfigError
    from phantora_prof.runtime.process.install import check_real_cuda

    check_real_cuda(8, None, 0, "2.13.0+cpu")  # CPU build: any number
    check_real_cuda(1, "13.0", 1, "2.11.0+cu130")  # one rank on a one-GPU machine: fine
    with pytest.raises(ConfigError, match=r"sees 1 GPU\(s\).*2 GPU\(s\) per node.*--nproc-per-node 1.*CPU build"):
        check_real_cuda(2, "13.0", 1, "2.11.0+cu130")


def test_protocol_messages_pickle_by_their_fields():
    """Ops cross to the coordinator pickled; the slotted dataclasses pickle as (class, fields)
    (protocol.pickled_by_fields), and come back equal."""
    import pickle

    from phantora_prof.cost.kernels import Kernel
    from phantora_prof.protocol import HostOps, OpCall, OpKind, TensorArg

    t = TensorArg((2, 3), (3, 1), "bfloat16", 0)
    k = Kernel("kernel", "gemm", 1500, (1, 2, 1), (128, 1, 1), 64, 0, 0, "cudaLaunchKernel", 1e6)
    op = OpCall(0, 7, "aten::mm", (t, [t, t], 2.0, None), {"out": t}, (t,), 1, 10, 20, 7, 0, OpKind.COMPUTE,
                seq_nr=3, launch_ns=15, kernels=(k,), depth=2)
    for obj in (t, k, op, HostOps(0, b"[]")):
        back = pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        assert back == obj and type(back) is type(obj)


def test_meta_cache_remakes_the_meta_kernels_outputs():
    """Fresh-output ops: the outputs' metadata per input signature, made again without the
    meta kernel (runtime/dispatch/meta_cache.py); another signature is a miss."""
    import torch

    from phantora_prof.runtime.dispatch.meta_cache import FRESH_OUTPUT_OPS, MetaCache

    aten = torch.ops.aten
    cache = MetaCache()
    x = torch.empty_strided((8, 16), (1, 8), dtype=torch.bfloat16, device="meta")  # a transposed layout
    w = torch.empty((16, 32), dtype=torch.bfloat16, device="meta")
    b = torch.empty((32,), dtype=torch.bfloat16, device="meta")
    calls = [(aten.addmm.default, (b, x, w), {}),
             (aten.native_layer_norm.default, (w, [32], b, b, 1e-5), {}),
             (aten._to_copy.default, (x,), {"dtype": torch.float32, "memory_format": torch.preserve_format})]
    for func, args, kwargs in calls:
        assert func in FRESH_OUTPUT_OPS
        key = cache.key(func, args, kwargs)
        assert key is not None and cache.outputs(key) is None
        real = func(*args, **kwargs)
        cache.remember(key, real)
        again = cache.outputs(cache.key(func, args, kwargs))
        for r, a in zip(real if isinstance(real, tuple) else (real,), again if isinstance(again, tuple) else (again,)):
            assert (a.shape, a.stride(), a.dtype, a.device.type) == (r.shape, r.stride(), r.dtype, "meta")
    assert cache.hits == 3 and cache.misses == 3
    y = torch.empty((8, 16), dtype=torch.bfloat16, device="meta")  # same shape, other strides: another signature
    assert cache.outputs(cache.key(aten._to_copy.default, (y,), calls[2][2])) is None
    assert aten.view.default not in FRESH_OUTPUT_OPS and aten.add_.Tensor not in FRESH_OUTPUT_OPS


def test_general_cache_remembers_fakes_own_answer_per_signature():
    """Ops on FakeTensorMode's general path (runtime/dispatch/meta_cache.py, GeneralCache): the
    answer is remembered with each output's device and the numbers it returns, per signature
    (device and type of every tensor included); factories, views, in-place ops and answers with
    a CPU tensor are never kept."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    from phantora_prof.runtime.dispatch.fake_wrap import FakeWrapper
    from phantora_prof.runtime.dispatch.meta_cache import GeneralCache, fresh_outputs

    aten = torch.ops.aten
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    wrap = FakeWrapper(mode).wrap
    cache = GeneralCache(FakeTensor)
    cuda0, cuda1 = torch.device("cuda", 0), torch.device("cuda", 1)
    q = wrap(torch.empty((2, 4, 16, 8), dtype=torch.bfloat16, device="meta"), cuda1)
    target = wrap(torch.empty((2,), dtype=torch.int64, device="meta"), cuda1)
    logits = wrap(torch.empty((2, 10), dtype=torch.float32, device="meta"), cuda1)
    args = (logits, target, None, 1, -100)
    key = cache.key(aten.nll_loss_forward.default, args, {})
    assert key is not None and cache.outputs(key, wrap) is None
    answer = (wrap(torch.empty((), device="meta"), cuda1), wrap(torch.empty((), device="meta"), cuda1))
    cache.remember(key, answer)
    again = cache.outputs(cache.key(aten.nll_loss_forward.default, args, {}), wrap)
    assert [(t.shape, t.stride(), t.dtype, t.device) for t in again] == \
           [(t.shape, t.stride(), t.dtype, t.device) for t in answer]
    assert again[0] is not answer[0] and type(again[0]) is FakeTensor
    # numbers in an answer come back as they were (cuDNN attention returns its max lengths)
    key2 = cache.key(aten.mul.Tensor, (q, q), {})
    cache.remember(key2, [wrap(torch.empty(3, device="meta"), cuda1), 7, None])
    assert cache.outputs(key2, wrap)[1:] == [7, None]
    # the same shapes on another GPU are another signature
    q0 = wrap(torch.empty((2, 4, 16, 8), dtype=torch.bfloat16, device="meta"), cuda0)
    assert cache.outputs(cache.key(aten.mul.Tensor, (q0, q0), {}), wrap) is None
    # never kept: a factory (its dtype may come from the default), views, in-place ops, CPU answers
    assert cache.key(aten.zeros.default, ([3],), {}) is None
    assert not fresh_outputs(aten.view.default) and not fresh_outputs(aten.add_.Tensor)
    assert not fresh_outputs(aten.add.out) and fresh_outputs(aten.add.Tensor)
    key3 = cache.key(aten.neg.default, (q,), {})
    cache.remember(key3, wrap(torch.empty(3, device="meta"), torch.device("cpu")))
    assert cache.outputs(key3, wrap) is None
