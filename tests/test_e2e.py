"""End to end: the CLI runs real scripts in a subprocess, as a user would."""
from __future__ import annotations

import re
import sys

import pytest

from conftest import REPO, SCRIPTS, reference_trace
from tracing.kineto import load_trace
from tracing.validate import validate_trace

PY = sys.executable


def _steps(stdout: str) -> list[float]:
    return [float(m) for m in re.findall(r"step \d+ time_ms ([0-9.]+)", stdout)]


def test_tiny_gpt_runs_and_writes_a_valid_trace(cli):
    r = cli("--out", "traces", PY, str(SCRIPTS / "tiny_gpt.py"), "3")
    assert r.returncode == 0, r.stderr[-3000:]
    steps = _steps(r.stdout)
    assert len(steps) == 3 and all(t > 0 for t in steps)
    assert steps[1] == steps[2]  # steady state of a deterministic simulation
    # tied embedding stays tied: 512*64 (wte) + 64*64 (wpe) + 2 blocks + lnf; head shares wte
    params = int(re.search(r"params (\d+)", r.stdout).group(1))
    assert params == 512 * 64 + 64 * 64 + 2 * (4 * 64 + 3 * 64 * 64 + 3 * 64 + 64 * 64 + 64 + 2 * 4 * 64 * 64 + 4 * 64 + 64) + 2 * 64
    assert "simulated" in r.stderr and "rank0.pt.trace.json.gz" in r.stderr
    trace = cli.cwd / "traces" / "rank0.pt.trace.json.gz"
    doc = load_trace(trace)
    reference = load_trace(reference_trace("gpt_small"))
    assert validate_trace(doc, reference) == []
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert {"cpu_op", "kernel", "cuda_runtime", "ac2g", "gpu_memset", "fwdbwd"} <= cats
    names = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}
    assert "aten::_scaled_dot_product_cudnn_attention" in names  # fused attention, not the math path
    assert "aten::_fused_adamw_" in names
    assert any(n.startswith("autograd::engine::evaluate_function: ") for n in names)
    assert _touching_host_events(doc) == []


def _touching_host_events(doc: dict) -> list:
    """Host events of one thread that touch or partly overlap: as in real traces (Python runs
    between ops), siblings are strictly apart and children inside their parents (TensorBoard's
    profiler plugin rejects ranges that intersect)."""
    by_tid: dict = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"):
            by_tid.setdefault(e["tid"], []).append((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000),
                                                    e["name"]))
    bad = []
    for events in by_tid.values():
        events.sort(key=lambda x: (x[0], -x[1]))
        stack: list = []
        for start, end, name in events:
            while stack and stack[-1][1] < start:
                stack.pop()
            if stack and (stack[-1][1] == start or stack[-1][1] < end):
                bad.append((stack[-1], (start, end, name)))
            stack.append((start, end, name))
    return bad


def test_two_runs_give_identical_traces(cli):
    for out in ("a", "b"):
        r = cli("--out", out, PY, str(SCRIPTS / "tiny_gpt.py"), "2")
        assert r.returncode == 0, r.stderr[-2000:]
    a = load_trace(cli.cwd / "a" / "rank0.pt.trace.json.gz")
    b = load_trace(cli.cwd / "b" / "rank0.pt.trace.json.gz")
    for doc in (a, b):  # ids of the run
        for key in ("trace_id", "baseTimeNanoseconds", "traceName"):
            doc.pop(key, None)
    assert a == b


@pytest.mark.parametrize("mode,code", [("argv", 0), ("exit", 3), ("raise", 1)])
def test_script_behaviour_passes_through(cli, mode, code):
    extra = ["3"] if mode == "exit" else []
    # a $TMPDIR too deep for a Unix socket's path (a scheduler's job directory) works too
    deep = cli.cwd / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), mode, *extra, env={"TMPDIR": str(deep)})
    assert r.returncode == code, r.stderr[-2000:]
    if mode == "argv":
        assert f"argv ['{SCRIPTS / 'behaviours.py'}', 'argv']" in r.stdout
        assert "main __main__" in r.stdout
    if mode == "raise":
        assert "ValueError: user error from the script" in r.stderr
        tb = r.stderr[r.stderr.index("Traceback"):]
        assert "phantora_prof" not in tb.split("ValueError")[0]  # the traceback is the script's own


def test_exit_keeps_what_the_script_observes(cli):
    """The rank exits without the interpreter's teardown (~1 s of CPU after torch): the exit
    code, files left open (closed as their finalizers would), atexit handlers and non-daemon
    threads are as under `python`."""
    import gzip

    text, packed = cli.cwd / "open.txt", cli.cwd / "open.txt.gz"
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "exit_effects", str(text), str(packed))
    assert r.returncode == 4, r.stderr[-2000:]
    assert text.read_text() == "left open\n"
    assert gzip.decompress(packed.read_bytes()).decode() == "gzip left open\n"
    assert r.stdout.index("non-daemon thread finished") < r.stdout.index("atexit handler ran")
    assert "Warning" not in r.stderr, r.stderr  # looking for open files touches no object's __class__


def test_self_profile_covers_the_autograd_thread(cli):
    """PHANTORA_CPROFILE: cProfile of the rank on the script's thread and, merged, on the
    threads the capture mode serves (autograd's runs the whole backward)."""
    import pstats

    prefix = cli.cwd / "prof"
    r = cli("--no-trace", PY, str(SCRIPTS / "tiny_gpt.py"), "1", env={"PHANTORA_CPROFILE": str(prefix)})
    assert r.returncode == 0, r.stderr[-2000:]
    main = pstats.Stats(str(prefix) + ".rank0")
    threads = pstats.Stats(str(prefix) + ".rank0.threads")
    names = {fn for (_file, _line, fn) in threads.stats}
    assert "_dispatch" in names  # the capture mode's work on autograd's thread
    assert main.total_calls > 0


def test_progress_bars_and_timeit_report_simulated_time(cli):
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "progress_clocks")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "timeit 2.000" in r.stdout
    assert "tqdm absent" in r.stdout or "tqdm elapsed 3.0" in r.stdout, r.stdout


def test_torch_cuda_answers_from_the_simulated_gpu(cli):
    r = cli("--no-trace", "--gpu", "h100", PY, str(SCRIPTS / "behaviours.py"), "cuda")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "available True count 1" in out
    assert "name NVIDIA H100" in out
    assert "capability (9, 0)" in out
    assert "device cuda:0 shape (1024, 1024) dtype torch.float32" in out
    assert "item 0.0 bool True" in out  # documented placeholders
    assert "cpu torch.Size([1024, 1024]) cpu" in out
    assert "pinned True" in out
    assert "allocated 41943040" in out  # x and y, 4 MiB each, + the 32 MiB cuBLAS workspace of the first GEMM
    # torch's own text for CUDA tensors, not FakeTensor's; a 0-d tensor takes format specs
    assert ("repr tensor([[0.0000, 0.1250, 0.2500],\n        [0.3750, 0.5000, 0.6250]], device='cuda:0')|"
            "Parameter containing:\ntensor([0.2500, 0.2500, 0.2500], device='cuda:0', requires_grad=True)|"
            "1.5|"  # f"{t}" of a 0-d tensor formats its item, as torch does
            "tensor(1.5000, device='cuda:0', grad_fn=<SumBackward0>)|"
            "tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n        [0., 0., 0.,  ..., 0., 0., 0.]], device='cuda:0')|"
            "format 1.50    1.500") in out, out
    assert ("numpy can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
            "memory first. [[0.0, 0.125, 0.25], [0.375, 0.5, 0.625]]") in out, out


def test_torch_version_cuda_is_a_cuda_builds(cli):
    """`torch.version.cuda` is the CUDA runtime the C++ side reports (native/fake_cuda.cpp's
    versionCUDART, 12.8), not a CPU build's None: torch (DDP's bf16 compression hook, fp8 GEMM
    output strides) and frameworks (transformers' tf32 check) take their CUDA paths on it."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "cuda_version")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "version.cuda 12.8 hip None" in r.stdout, r.stdout
    assert "bf16_compress_hook ran (64, 64)" in r.stdout, r.stdout


def test_python_gives_pythons_environment_and_torchrun_gives_torchruns(cli):
    """`phantora-prof python x.py` is `python x.py`: no RANK / LOCAL_RANK / WORLD_SIZE /
    MASTER_ADDR, which scripts and frameworks (accelerate, HF Trainer, nanoGPT) read as "launched
    distributed"; `phantora-prof torchrun` (even one process) and several ranks set them."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "launch_env")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "launch env []" in r.stdout, r.stdout
    r = cli("--no-trace", "torchrun", "--nproc-per-node=1", str(SCRIPTS / "behaviours.py"), "launch_env")
    assert r.returncode == 0, r.stderr[-2000:]
    assert ("launch env ['LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'RANK', "
            "'TORCHELASTIC_RUN_ID', 'WORLD_SIZE']") in r.stdout, r.stdout
    # `--nproc-per-node 1` asked for explicitly is a distributed launch too (torchtitan.sh at one rank)
    r = cli("--no-trace", "--nproc-per-node", "1", PY, str(SCRIPTS / "behaviours.py"), "launch_env")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "'LOCAL_RANK'" in r.stdout and "'RANK'" in r.stdout, r.stdout


def test_data_dependent_op_continues_with_estimate(cli):
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "unsupported")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "nonzero shape (65536, 1)" in r.stdout
    assert "aten::nonzero(torch.bool[65536]@cuda:0)" in r.stderr


def test_data_dependent_ops_wait_for_the_gpu(cli):
    """nonzero (and bincount, unique, boolean indexing) copy their output size to the host and
    synchronize: the host returns from it after the GEMM queued before it has run."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "sync")
    assert r.returncode == 0, r.stderr[-2000:]
    launch, after = map(float, re.search(r"launch_ms ([0-9.]+) after_nonzero_ms ([0-9.]+)", r.stdout).groups())
    assert launch < 0.2 and after > 1.0, r.stdout  # a 4096^3 fp32 GEMM: ~2-3 ms on an H200
    empty, copy = map(float, re.search(r"empty_copy_ms ([0-9.]+) copy_ms ([0-9.]+)", r.stdout).groups())
    assert empty < 0.2 and copy > 1.0, r.stdout


def test_ctc_loss_as_speech_models_run_it(cli):
    """HF wav2vec2's loss: cudnn.flags(...) reads cuDNN's benchmark limit (absent from a CPU
    build), `_use_cudnn_ctc_loss` is answered as CUDA answers it (int64 targets: no cuDNN), and
    `_ctc_loss` sizes its work by the longest target, read from the target lengths' values.
    Length tensors on the CPU with a CUDA loss run as on a GPU (runtime/dispatch/ctc_loss.py: ATen's
    plain-tensor path; its subclass path divided the CUDA loss by the CPU lengths and raised)."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "ctc")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ctc (36,) [9, 9, 9, 9] () (50, 4, 20) () 10 True () cuda" in r.stdout, r.stdout
    assert "upper bound" not in r.stderr


def test_transformer_encoder_inference_with_a_padding_mask_runs_dense(cli):
    """On a GPU the encoder's inference fast path turns a masked batch into a nested tensor; the
    simulated device has none, so the layers run on the padded tensor, with one warning that
    says so, and the module's own setting is left as it was."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "encoder_padding")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "encoder (3, 10, 64) (3, 10, 64) True" in r.stdout, r.stdout
    assert r.stderr.count("nested-tensor fast path") == 1, r.stderr


def test_packed_sequences_take_their_sizes_from_the_lengths(cli):
    """pack_padded_sequence / pad_packed_sequence on GPU data: the sizes come from the CPU
    lengths (values the simulation has), batch_sizes and the padded lengths are real CPU
    tensors, and the RNN and both backwards run."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "packed")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "packed (23, 16) [4, 4, 3, 3, 3, 3, 1, 1, 1] (4, 12, 32) [9, 6, 6, 2] (4, 9, 16)" in r.stdout, r.stdout


@pytest.mark.parametrize("gpus", [1, 2])
def test_dataparallel_scatters_replicates_and_gathers(cli, gpus):
    """nn.DataParallel and torch.cuda.comm use torch._C's comm functions, which only CUDA
    builds compile (runtime/device/comm.py); one process sees `--gpus-per-node` GPUs, and over
    two its replicas run one at a time and autograd's two device threads take turns in the
    capture mode."""
    r = cli("--no-trace", "--gpus-per-node", str(gpus), PY, str(SCRIPTS / "behaviours.py"), "dataparallel")
    assert r.returncode == 0, r.stderr[-2000:]
    parts = "[(6, 2)]" if gpus == 1 else "[(3, 2), (3, 2)]"
    assert f"dataparallel {gpus} (8, 4) cuda:0 {parts} (6, 2)" in r.stdout, r.stdout


def test_gpus_per_node_below_the_processes_is_refused(cli):
    r = cli("--no-trace", "--gpus-per-node", "1", "--nproc-per-node", "2", PY, str(SCRIPTS / "behaviours.py"), "argv")
    assert r.returncode != 0
    assert "--gpus-per-node 1 is fewer than --nproc-per-node 2" in r.stderr, r.stderr


def test_another_threads_sleep_does_not_hold_up_the_program(cli):
    """Only the script's thread sleeps in simulated time; a refresh loop on another thread
    (Lightning's RichProgressBar: 10 ms sleeps, 95 s of simulated time in a 32-step run before)
    waits in real time. 20 steps of 1 ms sleep plus a GEMM take ~21 ms simulated."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "sleeping_thread")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "sleeping_thread True" in r.stdout, r.stdout


def test_assigning_a_gpu_tensor_to_a_parameters_data(cli):
    """`param.data = param.to("cuda")` keeps the Parameter object and puts it on the simulated GPU
    (before: torch copied the fake's meta TensorImpl in and the parameter said 'meta')."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "data_setter")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "data_setter True cuda:0 True True torch.bfloat16 (4,)" in r.stdout, r.stdout


def test_parameters_keep_their_attributes_and_leave_the_gpu_by_data(cli):
    """A parameter's own attributes survive `.cuda()` (they were lost with the identity swap:
    a param-group rule reading `p.no_weight_decay` then grouped differently than on a GPU), and
    `p.data = p.data.cpu()` takes it off the simulated GPU and back (the parameter said cuda:0
    and its next op failed: "elem.device.type must be 'meta', got cpu"), also where another
    tensor holds it; its optimizer and backward still work afterwards."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "data_roundtrip")
    assert r.returncode == 0, r.stderr[-2000:]
    assert ("data_roundtrip ('cpu', 'Parameter', True, True, (4, 8), 0.0) True cuda:0 cuda:0 True cpu "
            "cpu Tensor [1.0, 1.0, 1.0]") in r.stdout, r.stdout


def test_an_ema_copy_and_decoding_at_batch_one(cli):
    """`copy.deepcopy(model)` gave tensors a FakeTensorMode of their own (the copy of each
    tensor's instance dict copied the mode), so `.half()` of the copy failed ("Cannot swap t1
    because it has weakref"); a Linear over one row crashed the cost model (KeyError 'beta')."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "ema_decode")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ema_decode True torch.float16 (1, 1) True" in r.stdout, r.stdout


def test_lazy_modules_moved_before_their_first_forward(cli):
    """`.cuda()` of a lazy module failed reading its placeholder's shape ("Can't access the shape
    of an uninitialized parameter"), and the placeholder then lost its class (in_features 0)."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "lazy_modules")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "lazy_modules True (10, 8) cuda:0 (10, 8) cuda:0 torch.float16 cuda:0 cpu" in r.stdout, r.stdout


def test_backend_queries_answer_as_a_cuda_wheel(cli):
    """`torch.backends.cuda.is_flash_attention_available()` and `can_use_*_attention(params)`
    said False on the CPU build; they answer as the CUDA wheel does on the simulated H200 (flash
    needs fp16/bf16, memory-efficient attention takes fp32). `is_built()` stays the build's own
    answer (False): torch's modules import CUDA bindings when it says True."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "sdpa_queries")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "sdpa_queries False True True True True False True" in r.stdout, r.stdout


def test_rnn_cells_and_attention_fast_paths(cli):
    """nn.GRUCell's fused CUDA kernels and `_masked_softmax` had no shape functions ("cannot
    simulate aten::_thnn_fused_gru_cell")."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "cells")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "cells (48, 8) (64, 16) (2, 10, 64) (2, 10, 10) (2, 4, 10, 10)" in r.stdout, r.stdout


def test_ambiguous_memory_formats_come_out_as_on_a_gpu(cli):
    """Tensors with size-1 dims are both contiguous and channels-last; ATen reads their strides.
    Module.to(memory_format=channels_last) gives a 1x1 convolution weight (C, 1, C, C) strides, its
    detach and Parameter keep them, empty_like follows an explicit format, and cuDNN runs a
    convolution of an NCHW input with that weight channels-last (so the batch norm after it
    too); an element-wise op over an all-contiguous [N, C, 1, 1] stays contiguous (TensorIterator),
    empty_like keeps its input's strides (preserve_format).
    Found by the held-out ShuffleNet profile: until session 36 the weight came out (C, 1, 1, 1),
    every later layer ran NCHW kernels (826 kernels per step against 1,004 real, GPU time +55%)."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "layouts")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "layouts (58, 1, 58, 58) (58, 1, 58, 58) (58, 1, 58, 58) (58, 1, 58, 58) (2842, 1, 406, 58) " \
           "(256, 1, 1, 1) (256, 1, 256, 256)" in r.stdout, r.stdout


def test_cuda_ops_torch_ships_without_shape_functions(cli):
    """torch.equal and torch.allclose failed ("DataDependentOutputException"), and Dirichlet / Beta / Binomial
    sampling, the margin losses' backward and cuDNN's grid sampler (F.grid_sample with
    align_corners=True) had no shape functions."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "rare_ops")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "grid_sample (2, 3, 5, 6) (2, 3, 8, 8) (2, 5, 6, 2)" in r.stdout, r.stdout
    assert "rare_ops True False False True False (3,) (3,) (3,) (3, 4)" in r.stdout, r.stdout


def test_quantization_aware_training_runs(cli):
    """torch.ao.quantization's QAT modules and the fake-quantize ops had no shape functions
    (`fake_quantize_per_tensor_affine_cachemask` and friends stopped the script)."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "qat")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "qat (16, 3, 3, 3) (64, 32) (1,) (1,) (16, 32)" in r.stdout, r.stdout


def test_jagged_nested_tensors_on_the_simulated_gpu(cli):
    """`torch.nested.nested_tensor(..., layout=torch.jagged)` on CUDA stopped with "should only be
    called while FakeTensorMode is active" (a FakeTensor's ragged size asked its mode for a
    symbolic int)."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "jagged")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "jagged 2 (80, 64) (80, 64) True" in r.stdout, r.stdout


def test_hugging_face_hub_kernels_are_off_unless_the_user_says(cli):
    """transformers' Hub kernels (CUDA binaries) cannot run on the simulated device: off by
    default (USE_HUB_KERNELS=0), the user's own setting kept."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "hub_kernels")
    assert r.returncode == 0 and "hub_kernels 0" in r.stdout, r.stdout + r.stderr[-2000:]
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "hub_kernels", env={"USE_HUB_KERNELS": "1"})
    assert r.returncode == 0 and "hub_kernels 1" in r.stdout, r.stdout + r.stderr[-2000:]


def test_a_scripts_own_thread_dispatches_cuda_ops(cli):
    """A thread the script starts (a prefetcher) gets the capture mode too (torch's mode stack
    is per thread): its copies and ops are simulated instead of reaching missing CUDA kernels."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "threads")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "threads 12" in r.stdout, r.stdout


def test_mixture_of_experts_routing_over_simulated_data_is_balanced(cli):
    """topk over data without values takes evenly spread choices, bincount / histc even
    counts: where, nonzero and split sizes downstream are a balanced router's, without the
    upper bound's warning (runtime/dispatch/values.py)."""
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "routing")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "routing [1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024] [1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024] " \
           "[1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024] [[0, 1], [2, 3]]" in r.stdout, r.stdout
    assert "split [1024, 1024, 1024]" in r.stdout
    assert "data-dependent output size" not in r.stderr


def test_cuda_generators_and_exact_data_dependent_sizes_of_small_tensors(cli):
    """torch.Generator(device="cuda") works on a CPU build; a random op's values come from the
    device's CUDA generator (fixed default seed: the same in every run, as on a GPU), and a
    boolean mask / nonzero / unique over a tensor with values gets its exact size."""
    runs = [cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "random") for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
        assert "exact True True True True" in r.stdout, r.stdout
        assert "generators True True cuda:0 cuda:0 cpu" in r.stdout, r.stdout
        assert "bad device: torch.Generator(device='cuda:7'): the simulated machine has 1 GPU(s)" in r.stdout
        assert "data-dependent output size" not in r.stderr
    draws = [re.search(r"^(sizes .*\n)draws (.*)$", r.stdout, re.M).group(0) for r in runs]
    assert draws[0] == draws[1]


def test_event_timing_and_perf_counter_read_simulated_time(cli):
    r = cli("--no-trace", PY, str(SCRIPTS / "behaviours.py"), "timing")
    assert r.returncode == 0, r.stderr[-2000:]
    ev, wall = map(float, re.search(r"event_ms ([0-9.]+) wall_ms ([0-9.]+)", r.stdout).groups())
    # ten 8192^3 bf16 GEMMs: ~1.1 TFLOP each -> ~1.1-2 ms each on an H200
    assert 8.0 < ev < 25.0
    assert ev <= wall < ev + 0.5


def test_python_dash_m_and_dash_c(cli, tmp_path):
    (tmp_path / "mymod.py").write_text("import sys, torch\nprint('mod', __name__, sys.argv[1:])\n")
    r = cli("--no-trace", PY, "-m", "mymod", "--flag", "x")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "mod __main__ ['--flag', 'x']" in r.stdout
    r = cli("--no-trace", PY, "-c", "import torch; print(torch.cuda.is_available())")
    assert r.returncode == 0 and r.stdout.strip() == "True"


def test_bad_command_is_a_clear_error(cli):
    r = cli("ls", "-l")
    assert r.returncode == 2
    assert "expected `python SCRIPT ...`" in r.stderr
    r = cli(PY, "does_not_exist.py")
    assert r.returncode == 2 and "does_not_exist.py" in r.stderr
    r = cli("--gpu", "v100", PY, "x.py")
    assert r.returncode == 2 and "v100" in r.stderr


def test_reference_streams_workload_runs_unmodified(cli):
    workloads = reference_trace("streams").parent.parent.parent / "workloads"
    r = cli("--out", "traces", PY, str(workloads / "streams.py"), "--steps", "4")
    assert r.returncode == 0, r.stderr[-2000:]
    steps = _steps(r.stdout)
    assert len(steps) == 4
    doc = load_trace(cli.cwd / "traces" / "rank0.pt.trace.json.gz")
    assert validate_trace(doc, load_trace(reference_trace("streams"))) == []
    memcpy = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"}
    assert "Memcpy HtoD (Pinned -> Device)" in memcpy and "Memcpy HtoD (Pageable -> Device)" in memcpy
    streams = {e["tid"] for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"}
    assert len(streams) >= 2  # the side stream copies
    # real H200: odd steps (pageable copy on the side stream) are slower than even ones
    assert steps[1] > steps[2] * 1.05


def test_real_script_features(cli):
    """DataLoader workers + pin_memory, seeds, backend flags, torch.compile (simulated Inductor),
    nvtx, AMP GradScaler.

    Run twice at once (the OS interleaves the workers, the pinning thread and the loop
    differently each time): the traces must be the same."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda out: cli("--out", out, PY, str(SCRIPTS / "features.py"), "train"),
                             ("traces", "again")))
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    r = runs[0]
    twice = [load_trace(cli.cwd / out / "rank0.pt.trace.json.gz") for out in ("traces", "again")]
    for doc in twice:  # ids of the run
        for key in ("trace_id", "baseTimeNanoseconds", "traceName"):
            doc.pop(key, None)
    assert twice[0] == twice[1]
    assert "steps 8" in r.stdout
    assert "runs eagerly" not in r.stderr  # torch.compile is simulated (runtime/compile/)
    doc = load_trace(cli.cwd / "traces" / "rank0.pt.trace.json.gz")
    triton = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("triton_")}
    assert triton, "the compiled model launches Inductor's Triton kernels"
    annotations = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"}
    assert {"forward", "backward"} <= annotations
    gpu_annotations = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "gpu_user_annotation"}
    assert {"forward", "backward"} <= gpu_annotations
    memcpy = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    assert any(e["name"] == "Memcpy HtoD (Pinned -> Device)" for e in memcpy)
    # the DataLoader's pinning thread runs at real-time pace beside the loop: its ops are not
    # recorded (they used to land on the autograd thread's row, overlapping its ops under load)
    autograd_tids = {e["tid"] for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("name") == "thread_name"
                     and "pt_autograd" in e["args"]["name"]}
    assert autograd_tids
    assert not [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["tid"] in autograd_tids
                and e["name"] == "aten::pin_memory"]
    assert validate_trace(doc, load_trace(reference_trace("gpt_small"))) == []


def test_default_optimizers_take_the_foreach_path_as_on_cuda(cli):
    """foreach=None picks multi-tensor kernels on CUDA; simulated parameters (FakeTensors)
    used to fall back to the per-parameter for-loop (~10 kernels per parameter)."""
    r = cli("--out", "traces", PY, str(SCRIPTS / "optimizer_defaults.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "defaults (False, True)" in r.stdout and "clip foreach True" in r.stdout
    doc = load_trace(cli.cwd / "traces" / "rank0.pt.trace.json.gz")
    ops = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    assert "aten::_foreach_addcdiv_" in ops and "aten::_foreach_norm" in ops  # AdamW, clip_grad_norm_
    assert "aten::addcdiv_" not in ops  # no per-parameter AdamW
    assert ops.count("aten::_fused_adamw_") == 1  # the fused one, lr a CPU tensor
    kernels = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert any("multi_tensor_apply_kernel" in k for k in kernels)


def test_custom_op_without_fake_is_named_clearly(cli):
    r = cli("--no-trace", PY, str(SCRIPTS / "features.py"), "custom_op")
    assert r.returncode == 1
    assert "phantora-prof cannot simulate phantora_test::no_fake(torch.float32[8, 16]@cuda:0)" in r.stderr
    assert "register_fake" in r.stderr
    assert "unreachable" not in r.stdout


def test_an_op_whose_shape_function_refuses_the_call_says_so(cli):
    """An op with a shape function (Meta kernel or fake) that raises for these arguments is not
    reported as lacking one: its own complaint comes first, then what to do (a CUDA build's
    checks can differ from the Meta kernel's: torch's `_grouped_mm` Meta kernel took bf16 only)."""
    r = cli("--no-trace", PY, str(SCRIPTS / "features.py"), "custom_op_refusing_fake")
    assert r.returncode == 1
    err = r.stderr.replace("\n", " ")
    assert "cannot simulate phantora_test::picky(torch.float32[8, 16]@cuda:0)" in err
    assert "Expected a BF16 input, got torch.float32" in err and "refused these arguments" in err
    assert "has no fake" not in err and "register a fake that accepts them" in err
    assert "unreachable" not in r.stdout


def test_op_cost_option_times_a_custom_op(cli):
    r = cli("--no-trace", "--op-cost", "phantora_test::with_fake=2.5ms", PY, str(SCRIPTS / "features.py"),
            "custom_op_fake")
    assert r.returncode == 0, r.stderr[-2000:]
    ms = float(re.search(r"custom_ms ([0-9.]+)", r.stdout).group(1))
    assert 2.5 <= ms < 2.6


def test_out_of_memory_ends_with_the_real_error_and_a_valid_trace(cli):
    r = cli("--gpu", "a100", "--out", "traces", PY, str(SCRIPTS / "oom.py"))
    assert r.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 GiB" in r.stderr
    tb = r.stderr[r.stderr.index("Traceback"):r.stderr.index("torch.OutOfMemoryError")]
    assert 'oom.py", line 3' in tb and "phantora_prof" not in tb  # points at the user's line
    doc = load_trace(cli.cwd / "traces" / "rank0.pt.trace.json.gz")
    assert validate_trace(doc) == []


def test_tensors_on_two_devices_fail_as_on_cuda(cli):
    r = cli("--no-trace", "--nproc-per-node", "2", PY, str(SCRIPTS / "mixed_devices.py"))
    assert r.returncode == 1
    assert "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, " \
           "cuda:0 and cuda:1!" in r.stderr


def test_trace_formats_and_report(cli):
    r = cli("--out", "p", "--format", "perfetto", "--report", "rep", PY, str(SCRIPTS / "tiny_gpt.py"), "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in (cli.cwd / "p").iterdir()) == ["run.pftrace"]
    assert (cli.cwd / "p" / "run.pftrace").stat().st_size > 1000
    assert (cli.cwd / "rep" / "summary.json").exists() and (cli.cwd / "rep" / "step_breakdown.png").exists()
    r = cli("--out", "k", "--format", "kineto", PY, str(SCRIPTS / "tiny_gpt.py"), "1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in (cli.cwd / "k").iterdir()) == ["rank0.pt.trace.json.gz"]


def test_optimizer_python_costs_host_time(cli):
    """A fused step's per-parameter Python and zero_grad's loop take simulated host time
    (hostcost.OPTIMIZER_PYTHON_NS, measured on the H200 with --host-probe)."""
    from phantora_prof import hostcost

    r = cli("--no-trace", PY, str(SCRIPTS / "optimizer_host.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    step_ns, zero_ns = (int(x) for x in r.stdout.split()[1::2])
    per = hostcost.OPTIMIZER_PYTHON_NS
    assert step_ns >= 20 * per["fused_step_per_param"]  # plus the fused kernel's own launch
    assert step_ns < 20 * per["fused_step_per_param"] + 200_000
    # set_to_none: no ops, the Python loop and zero_grad's record_function range
    assert 20 * per["zero_grad_per_param"] <= zero_ns <= 20 * per["zero_grad_per_param"] + 5_000


def test_channels_last_convolutions_stay_channels_last(cli):
    """A CPU build has no cuDNN, so fake convolutions came out NCHW; cuDNN keeps NHWC."""
    r = cli("--out", "traces", PY, str(SCRIPTS / "conv_channels_last.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "y (1568, 1, 112, 8) True torch.bfloat16" in r.stdout
    assert "z (1568, 1, 112, 8)" in r.stdout  # batch norm follows its input
    assert "grad w True" in r.stdout
    # the bias is added as cuDNN's caller does, to a [1, C, 1, 1] view (traced as in the H200
    # traces of biased convolutions; it used to carry the output's shape)
    doc = load_trace(cli.cwd / "traces" / "rank0.pt.trace.json.gz")
    adds = [e["args"] for e in doc["traceEvents"] if e.get("name") == "aten::add_" and e.get("cat") == "cpu_op"]
    assert any(a["Input Dims"] == [[2, 8, 14, 14], [1, 8, 1, 1], []] and a["Input Strides"][1] == [8, 1, 1, 1]
               for a in adds), adds


def test_checkpoints_round_trip_and_load_in_a_plain_cpu_process(cli):
    """torch.save of model and optimizer state on the simulated GPU writes a real checkpoint:
    it loads back onto the simulated GPU (values of small tensors, shared storages, map_location)
    and, with map_location="cpu", in a plain CPU process as a real GPU checkpoint would."""
    import torch

    r = cli("--no-trace", PY, str(SCRIPTS / "checkpoint.py"), str(cli.cwd))
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "step cuda:0 7" in out
    assert "big cuda:0 (512, 1024) shares 2097152 12288" in out  # one storage, the view 3 rows in
    assert "weights equal True" in out
    assert "optim step 2.0 cuda:0" in out
    assert "cpu cpu True" in out
    assert "map device cuda:0 7" in out
    assert "module Sequential True cuda:0" in out
    ck = torch.load(cli.cwd / "ckpt.pt", map_location="cpu")
    assert torch.equal(ck["model"]["0.weight"], torch.load(cli.cwd / "w0.pt"))  # small tensors hold their values
    assert ck["step"].item() == 7 and float(ck["optim"]["state"][0]["step"]) == 2.0
    assert ck["big"].shape == (512, 1024) and ck["big"].dtype == torch.float32
    assert ck["big_rows"].untyped_storage().data_ptr() == ck["big"].untyped_storage().data_ptr()
    assert int(ck["big"].count_nonzero()) == 512 * 1024  # `ones`: large, but its values are known
    assert ck["noise"].shape == (256, 1024) and int(ck["noise"].count_nonzero()) == 0  # simulated data: zeros
    with pytest.raises(RuntimeError, match="CUDA"):  # the storages are on the GPU, as in a real checkpoint
        torch.load(cli.cwd / "ckpt.pt")


def test_torch_save_and_load_cost_host_time_per_byte_of_the_file(cli):
    """The CPU side of a checkpoint is host time (host_model.json "serialization", measured on the
    GPU machine's host): torch.save per byte of the file, to a path or to a file object;
    torch.load per storage read back, more per byte from 32 MiB (fresh pages); not free as it was."""
    from phantora_prof import hostcost

    r = cli("--no-trace", PY, str(SCRIPTS / "save_timed.py"), str(cli.cwd))
    assert r.returncode == 0, r.stderr[-3000:]
    path_bytes, buf_bytes = (int(v) for v in r.stdout.split("BYTES ")[1].split()[:2])
    save_path, save_buf, load_buf, load_mmap = (int(v) for v in r.stdout.split("TIMES_NS ")[1].split()[:4])
    assert path_bytes > 48 << 20 and buf_bytes > 48 << 20
    load = 4 * hostcost.storage_read_ns(4 << 20) + hostcost.storage_read_ns(32 << 20)
    assert hostcost.storage_read_ns(32 << 20) > 4 * hostcost.storage_read_ns(8 << 20)  # fresh pages cost more
    for measured, expected in ((save_path, hostcost.save_ns(path_bytes)),
                               (save_buf, hostcost.save_ns(buf_bytes)), (load_buf, load)):
        assert expected > 10_000_000  # tens of ms on the reference host
        # the charge, plus the counted Python of torch.save / torch.load (torch.load's: ~10% here)
        assert expected <= measured < expected * 1.25, (measured, expected)
    assert load_mmap < load / 2  # mmap=True: read lazily, not charged


def test_cpu_copies_into_new_host_memory_fault_its_pages_in(cli):
    """`.cpu()` of a large CUDA tensor lands in new pageable memory, from 32 MiB fresh pages from
    the OS that the copy faults in (hostcost.fresh_pages_ns, as torch.load's large storages): it
    costs more than a copy_ into a host tensor touched earlier; small copies do not pay it. A
    non-blocking `.to("cpu")` gets pinned memory, as a CUDA build's _to_copy gives it. The probe
    is the one run on the GPU machine (tools/holdout/d2h_probe.py, milliseconds)."""
    import json

    from phantora_prof import hostcost

    r = cli("--no-trace", PY, str(REPO / "tools" / "holdout" / "d2h_probe.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    ms = json.loads(r.stdout.split("D2H ")[1].splitlines()[0])
    fresh, reused = ms["cpu_64mib_fresh"] * 1e6, ms["copy_64mib_reused"] * 1e6
    small_fresh, small_reused = ms["cpu_4mib"] * 1e6, ms["copy_4mib_reused"] * 1e6
    pages = hostcost.fresh_pages_ns(64 << 20)
    assert pages > 30_000_000  # tens of ms for 64 MiB on the reference host
    assert abs((fresh - reused) - pages) < 0.05 * pages, (fresh, reused, pages)
    assert hostcost.fresh_pages_ns(4 << 20) == 0 and abs(small_fresh - small_reused) < 20_000, (small_fresh, small_reused)
    # non_blocking=True: ATen pins the output, so the host does not wait and no fresh pages are faulted
    nb_return, nb_done = ms["nonblocking_return"] * 1e6, ms["nonblocking_done"] * 1e6
    assert ms["nonblocking_pinned"] is True
    assert nb_return < 100_000 and nb_done < reused / 3, (nb_return, nb_done, reused)


def test_bad_output_paths_are_found_before_the_script_starts(cli):
    """A bad --out / --summary-json / --report is a one-line error (exit 2) before the script
    runs; the script never starts (it would print 'exiting')."""
    (cli.cwd / "afile").write_text("x")
    for args, needle in ((["--out", "afile"], "--out afile: afile is a file, not a directory"),
                         (["--out", "afile/sub"], "--out afile/sub: cannot write in afile/sub"),
                         (["--summary-json", "afile/s.json"], "--summary-json afile/s.json: afile is a file"),
                         (["--summary-json", "."], "--summary-json .: is a directory"),
                         (["--report", "afile/r"], "--report afile/r: cannot write in afile/r")):
        r = cli(*args, PY, str(SCRIPTS / "behaviours.py"), "exit", "3")
        assert r.returncode == 2, (args, r.stderr[-2000:])
        assert "exiting" not in r.stdout and "Traceback" not in r.stderr
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], (args, r.stderr)
    # --no-trace does not use --out
    r = cli("--no-trace", "--out", "afile", PY, str(SCRIPTS / "behaviours.py"), "exit", "3")
    assert r.returncode == 3 and "exiting" in r.stdout


def test_output_error_at_the_end_keeps_the_scripts_exit_code_and_says_so(cli, tmp_path):
    """The output directory disappears under the run (replaced by a file): the script's own
    exit code stays; when the script succeeded, exit 1 with a line saying why."""
    script = tmp_path / "sabotage.py"
    script.write_text("import os, shutil, sys, torch\n"
                      "torch.ones(4, device='cuda').sum().item()\n"
                      "shutil.rmtree('t'); open('t', 'w').close()\n"
                      "sys.exit(int(sys.argv[1]))\n")
    r = cli("--out", "t", PY, str(script), "3")
    assert r.returncode == 3, r.stderr[-2000:]
    assert "phantora-prof: error: the traces could not be written to t" in r.stderr
    assert "Traceback" not in r.stderr
    script.write_text(script.read_text().replace("'t'", "'t3'"))
    r = cli("--out", "t3", PY, str(script), "0")
    assert r.returncode == 1, r.stderr[-2000:]
    assert "the traces could not be written to t3" in r.stderr
    assert "exit status 1 because outputs are missing (the script itself exited 0)" in r.stderr


def test_summary_is_not_wrapped_at_80_columns_in_a_log(cli):
    """Output to a file or pipe (no terminal, no COLUMNS): the table and lines keep their width."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(SCRIPTS.parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    import subprocess

    r = subprocess.run([PY, "-m", "phantora_prof", "--no-trace", PY, str(SCRIPTS / "behaviours.py"), "cuda"],
                       cwd=cli.cwd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    header = next(ln for ln in r.stderr.splitlines() if "rank" in ln and "exit" in ln)
    assert "reserved" in header and "peak mem" in header  # one line, not wrapped
    assert any(re.match(r"GPU time (of the steps after the first )?by source of its kernel times:", ln)
               and ln.rstrip().endswith("%")
               for ln in r.stderr.splitlines())


def test_traces_of_an_earlier_run_are_removed_from_out(cli):
    """A larger earlier run left rank1..3 in --out: this 1-rank run leaves only its own traces
    there (merge would combine them), and files that are not ours stay."""
    out = cli.cwd / "t"
    out.mkdir()
    for name in ("rank1.pt.trace.json.gz", "rank3.pt.trace.json.gz", "run.pftrace", "notes.txt",
                 "rank0.pt.trace.json"):
        (out / name).write_text("old")
    r = cli("--out", "t", PY, str(SCRIPTS / "behaviours.py"), "argv")
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "rank0.pt.trace.json", "rank0.pt.trace.json.gz",
                                                     "run.pftrace"]
    assert (out / "run.pftrace").read_bytes() != b"old"


def test_socket_directory_fits_a_unix_socket_path(tmp_path, monkeypatch):
    """The coordinator's socket directory: in $TMPDIR, or in /tmp when $TMPDIR is too deep."""
    import os
    import tempfile

    from phantora_prof import launcher

    short = tempfile.mkdtemp(dir="/tmp")
    try:
        monkeypatch.setattr(tempfile, "tempdir", short)
        d = launcher._socket_dir()
        assert os.path.dirname(d) == short
        os.rmdir(d)
    finally:
        os.rmdir(short)
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    d = launcher._socket_dir()
    try:
        assert os.path.dirname(d) == "/tmp" and list(deep.iterdir()) == []
        assert len(os.path.join(d, "coordinator.sock")) <= 103
    finally:
        os.rmdir(d)


def test_a_rank_wrapper_runs_each_rank_under_a_command(cli, tmp_path):
    """PHANTORA_RANK_WRAPPER (developer aid, phantora_prof/launcher.py): each rank process starts
    under the command, `{rank}` replaced (tests/bench_runtime.py runs ranks under callgrind)."""
    script = tmp_path / "wrapped.py"
    script.write_text("import os, torch\n"
                      "torch.ones(4, device='cuda').sum().item()\n"
                      "print('wrapped', os.environ['RANK'], os.environ.get('UNDER_WRAPPER'))\n")
    r = cli("--no-trace", "--nproc-per-node", "2", PY, str(script),
            env={"PHANTORA_RANK_WRAPPER": "env UNDER_WRAPPER=w{rank}"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "wrapped 0 w0" in r.stdout and "wrapped 1 w1" in r.stdout


def test_a_cuda_fake_tensor_counts_as_cuda_while_another_thread_runs_a_fake_kernel():
    """The race behind the prefetch thread's rare failure: FakeTensor.device answers "meta"
    while its fake mode (shared by all threads) is inside a kernel invocation; the capture mode
    must still see the tensor as a CUDA one."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    from phantora_prof.runtime.dispatch.capture import CaptureMode

    mode = FakeTensorMode()
    t = FakeTensor(mode, torch.empty(2, device="meta"), torch.device("cuda", 0))
    mode.in_kernel_invocation = True  # as while another thread's op is being faked
    assert t.device.type == "meta"
    assert CaptureMode._touches_cuda((t,), {})
    assert CaptureMode._touches_cuda(([t],), {})
    assert CaptureMode._touches_cuda((), {"other": t})
