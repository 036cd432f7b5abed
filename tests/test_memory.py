"""The simulated CUDA caching allocator: policy (unit tests of AllocatorModel), what scripts read
(end to end), and the calibration against the H200 reference run of memory_probe.py."""
from __future__ import annotations

import gc
import json
import random
import re
import sys

import pytest
import torch

from conftest import REFERENCE, SCRIPTS, SHARED
from phantora_prof.runtime.device.allocator import (
    AllocatorConfig,
    AllocatorModel,
    allocation_size,
    cublas_workspace_size,
    cublaslt_workspace_size,
    format_size,
    round_size,
)
from phantora_prof.runtime.device.op_allocations import reduction_scratch

MiB = 1 << 20
GiB = 1 << 30
PY = sys.executable


def model(capacity: int = 80 * GiB, **kw) -> AllocatorModel:
    return AllocatorModel(capacity, context_bytes=kw.pop("context_bytes", 0), **kw)


class Storage:
    """Stands in for a tensor's untyped storage (weak-referenceable, takes attributes)."""


# ---------------------------------------------------------------- sizes

def test_rounding_and_segment_sizes():
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert allocation_size(512) == 2 * MiB and allocation_size(MiB) == 2 * MiB
    assert allocation_size(MiB + 512) == 20 * MiB and allocation_size(10 * MiB - 512) == 20 * MiB
    assert allocation_size(10 * MiB) == 10 * MiB and allocation_size(11 * MiB) == 12 * MiB
    cfg = AllocatorConfig("roundup_power2_divisions:4")
    assert round_size(1200 * 1024, cfg) == 1280 * 1024  # 1 MiB .. 2 MiB in 4 steps
    assert round_size(1000, cfg) == 1024
    assert format_size(1024) == "1024 bytes" and format_size(1536) == "1.50 KiB"
    assert format_size(30 * GiB) == "30.00 GiB" and format_size(20 * MiB) == "20.00 MiB"


def test_zero_bytes_allocate_nothing():
    m = model()
    assert m.malloc(0) is None
    assert m.allocated == m.reserved == 0 and m.stats()["allocation.all.allocated"] == 0


def test_small_pool_packs_2mib_segments():
    m = model()
    blocks = [m.malloc(512 * 1024) for _ in range(4)]
    assert m.reserved == 2 * MiB and m.stats_dict()["segment.small_pool.current"] == 1
    assert len({b.segment_base for b in blocks}) == 1
    m.malloc(512)
    assert m.reserved == 4 * MiB and m.stats_dict()["segment.small_pool.current"] == 2
    m.check()


def test_large_pool_split_rules():
    m = model()
    a = m.malloc(19 * MiB)  # 20 MiB segment; a remainder of 1 MiB is not split off
    assert a.size == 20 * MiB and m.allocated == 20 * MiB
    assert m.stats_dict()["requested_bytes.all.current"] == 19 * MiB
    b = m.malloc(int(18.5 * MiB))  # a remainder of 1.5 MiB is
    assert b.size == int(18.5 * MiB) and m.reserved == 40 * MiB
    stats = m.stats_dict()
    assert stats["inactive_split.large_pool.current"] == 1
    assert stats["inactive_split_bytes.large_pool.current"] == int(1.5 * MiB)
    c = m.malloc(24 * MiB)  # >= 10 MiB: its own segment, rounded up to 2 MiB
    assert c.size == 24 * MiB and m.reserved == 64 * MiB
    m.check()


def test_free_coalesces_and_empty_cache_releases_whole_segments():
    m = model()
    a, b, c = m.malloc(3 * MiB), m.malloc(4 * MiB), m.malloc(5 * MiB)
    assert len({x.segment_base for x in (a, b, c)}) == 1 and m.reserved == 20 * MiB
    m.free(b)
    assert m.stats_dict()["inactive_split.large_pool.current"] == 2  # b's hole and the tail
    m.free(a)  # merges with b's hole
    assert m.stats_dict()["inactive_split.large_pool.current"] == 2
    m.empty_cache()
    assert m.reserved == 20 * MiB  # c still lives in the segment
    m.free(c)  # now one free 20 MiB block
    stats = m.stats_dict()
    assert stats["inactive_split.all.current"] == 0 and stats["inactive_split_bytes.all.current"] == 0
    assert m.reserved == 20 * MiB and m.allocated == 0
    m.empty_cache()
    assert m.reserved == 0 and m.stats_dict()["num_device_free"] == 1
    m.check()


def test_best_fit_takes_the_smallest_block_then_the_lowest_address():
    m = model()
    big, small = m.malloc(16 * MiB), m.malloc(12 * MiB)  # own segments
    m.free(big)
    m.free(small)
    got = m.malloc(11 * MiB)
    assert got.segment_base == small.segment_base and got.size == 12 * MiB  # remainder 1 MiB: whole
    # equal sizes: the lowest address, i.e. the newer segment (addresses are handed out top down)
    m2 = model()
    old, new = m2.malloc(12 * MiB), m2.malloc(12 * MiB)
    assert new.addr < old.addr
    m2.free(old)
    m2.free(new)
    assert m2.malloc(12 * MiB).addr == new.addr


def test_cached_blocks_are_reused_per_stream():
    m = model()
    a = m.malloc(4 * MiB, stream=7)
    m.free(a)
    b = m.malloc(4 * MiB, stream=13)  # another stream never takes stream 7's cached block
    assert m.reserved == 40 * MiB and b.segment_base != a.segment_base
    c = m.malloc(4 * MiB, stream=7)
    assert c.segment_base == a.segment_base and m.reserved == 40 * MiB


def test_record_stream_delays_reuse():
    m = model()
    a = m.malloc(4 * MiB, stream=13)
    m.record_stream(a, 7)
    m.free(a)
    stats = m.stats_dict()
    assert stats["allocated_bytes.all.current"] == 0 and stats["active_bytes.all.current"] == 4 * MiB
    m.check()
    # no host synchronization reported: reusable at the next allocation
    assert m.malloc(4 * MiB, stream=13).segment_base == a.segment_base
    # with synchronizations reported, only after one
    m2 = model()
    m2.note_host_sync()
    b = m2.malloc(4 * MiB, stream=13)
    m2.record_stream(b, 7)
    m2.free(b)
    c = m2.malloc(4 * MiB, stream=13)
    assert c.addr != b.addr
    m2.note_host_sync()
    assert m2.malloc(4 * MiB, stream=13).addr == b.addr
    m2.check()


def test_peaks_reset_and_accumulated_counters():
    m = model()
    a = m.malloc(30 * MiB)
    m.free(a)
    assert m.peak_allocated == 30 * MiB and m.allocated == 0
    m.reset_peak()
    assert m.peak_allocated == 0 and m.peak_reserved == 30 * MiB
    b = m.malloc(10 * MiB)
    m.reset_peak()
    # the run's peaks (the summary's "peak mem") outlive the script's resets
    assert m.peak_allocated == 10 * MiB and m.run_peak_allocated == 30 * MiB
    m.free(b)
    m.reset_accumulated()
    stats = m.stats_dict()
    assert stats["allocation.all.allocated"] == 0 and stats["num_device_alloc"] == 0
    assert stats["reserved_bytes.all.current"] == 30 * MiB


def test_storages_free_when_they_die_and_shared_blocks_when_all_died():
    m = model()
    s = Storage()
    b = m.track_storage(s, 5000)
    assert b.size == 5120 and s._phantora_block is b and m.allocated == 5120
    t = Storage()
    assert m.share_storage(t, s) is b  # an in-place result reusing s's block
    del s
    gc.collect()
    assert m.allocated == 5120
    del t
    gc.collect()
    assert m.allocated == 0
    m.check()


def test_on_event_reports_every_alloc_and_free():
    m = model()
    events = []
    m.on_event = lambda addr, delta, alloc, reserved: events.append((addr, delta, alloc, reserved))
    a = m.malloc(1000)
    m.free(a)
    assert events == [(a.addr, 1024, 1024, 2 * MiB), (a.addr, -1024, 0, 2 * MiB)]
    assert 0x7F0000000000 < a.addr < 0x800000000000


def test_oom_frees_cached_segments_then_raises_the_real_message():
    m = model(capacity=GiB)
    a = m.malloc(400 * MiB)
    m.free(a)  # cached, not split: released when a new segment does not fit
    b = m.malloc(700 * MiB)
    stats = m.stats_dict()
    assert stats["num_alloc_retries"] == 1 and stats["num_device_free"] == 1 and m.reserved == 700 * MiB
    c = m.malloc(100 * MiB)
    with pytest.raises(torch.OutOfMemoryError) as err:
        m.malloc(300 * MiB)
    msg = str(err.value)
    assert re.match(r"CUDA out of memory\. Tried to allocate 300\.00 MiB\. GPU 0 has a total capacity of "
                    r"1024\.00 MiB of which 224\.00 MiB is free\. Including non-PyTorch memory, this process "
                    r"has 800\.00 MiB memory in use\. Of the allocated memory 800\.00 MiB is allocated by "
                    r"PyTorch, and 0 bytes is reserved by PyTorch but unallocated\. If reserved but "
                    r"unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
                    r"True", msg), msg
    assert m.stats_dict()["num_ooms"] == 1
    m.free(b)
    m.free(c)
    m.check()


def test_memory_fraction_and_max_split_size():
    m = model(capacity=GiB)
    m.allowed_memory_maximum = 256 * MiB
    with pytest.raises(torch.OutOfMemoryError, match="256.00 MiB allowed; "):
        m.malloc(300 * MiB)
    m = model(config=AllocatorConfig("max_split_size_mb:64"))
    big = m.malloc(100 * MiB)
    m.free(big)
    small = m.malloc(30 * MiB)  # never carved out of an oversize block
    assert small.segment_base != big.segment_base
    near = m.malloc(90 * MiB)  # an oversize request takes it if within 20 MiB
    assert near.segment_base == big.segment_base and near.size == 100 * MiB
    stats = m.stats_dict()
    assert stats["max_split_size"] == 64 * MiB and stats["oversize_allocations.current"] == 1
    assert model().stats_dict()["max_split_size"] == -1


def test_random_sequences_keep_the_allocator_consistent():
    rng = random.Random(3)
    m = model(capacity=4 * GiB)
    live = []
    for _ in range(3000):
        if live and rng.random() < 0.45:
            m.free(live.pop(rng.randrange(len(live))))
        else:
            size = rng.choice([rng.randrange(1, 4096), rng.randrange(1, 2 * MiB), rng.randrange(1, 40 * MiB)])
            live.append(m.malloc(size, stream=rng.choice([7, 7, 13])))
        if rng.random() < 0.01:
            m.empty_cache()
    m.check()
    assert m.allocated == sum(b.size for b in live)
    for b in live:
        m.free(b)
    m.empty_cache()
    assert m.allocated == 0 and m.reserved == 0


# ---------------------------------------------------------------- allocations without tensors

def test_workspace_sizes(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.delenv("CUBLASLT_WORKSPACE_SIZE", raising=False)
    assert cublas_workspace_size(9, 0) == 32 * MiB and cublas_workspace_size(8, 0) == 8519680
    assert cublaslt_workspace_size(32 * MiB) == MiB
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    assert cublas_workspace_size(9, 0) == 32 * MiB
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert cublas_workspace_size(9, 0) == 128 * 1024
    m = model()
    m.gemm(lt=True, stream=7)
    m.gemm(lt=True, stream=7)  # once per (thread, stream)
    assert m.allocated == 128 * 1024 + 128 * 1024  # Lt capped at the cuBLAS size


def test_reduction_scratch_matches_the_measured_bias_gradient_sums():
    # sum over the 8192 rows of a [8192, N] bf16 gradient on an H200 (132 SMs), as measured
    for n, buf in ((768, 50331648), (3072, 138412032), (2304, 139198464)):
        size, sem = reduction_scratch((8192, n), (n, 1), 2, {0}, 4, 132)
        assert size == buf and 0 < sem <= 512
    assert reduction_scratch((64, 64), (64, 1), 4, {0}, 4, 132) == (0, 0)  # fits in one block
    assert reduction_scratch((8192, 768), (768, 1), 2, {1}, 4, 132) == (0, 0)  # rows: block-local


# ---------------------------------------------------------------- end to end

def test_script_sees_views_inplace_frees_caching_and_dies_of_oom(cli):
    r = cli("--gpu", "a100", "--no-trace", PY, str(SCRIPTS / "memory_behaviours.py"), "oom", timeout=300)
    assert r.returncode != 0, r.stdout[-2000:]
    out = json.loads(r.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert out["small"] == 4096 and out["view_keeps_storage"] == 4096 and out["view_freed"] == 0
    assert out["inplace_delta"] == 0 and out["outofplace_delta"] == MiB
    assert out["big_reserved_delta"] == 100 * MiB and out["cached_after_free"] == 100 * MiB
    assert out["reserved_after_empty_cache"] == 0
    # relu output kept for backward + loss + the main thread's cuBLAS workspace (sm80: :4096:2:16:8)
    assert out["forward_holds"] == 4 * MiB + 512 + 8519680
    # w.grad + the autograd thread's own cuBLAS workspace
    assert out["after_backward"] == 4 * MiB + 2 * 8519680
    assert out["peak_after_reset"] == 0 and out["stats_allocated"]
    free, total = out["mem_get_info"]
    assert total > 79 * GiB and free < total
    reference = _reference_memstats()
    if reference is not None:
        assert set(out["stats_keys"]) == set(reference)
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a total " \
           "capacity of" in r.stderr
    assert "Traceback" in r.stderr and "not reached" not in r.stdout


def _reference_memstats() -> dict | None:
    log = REFERENCE / "gpt_small_memory" / "memory_probe.log"
    if not log.exists():
        return None
    return json.loads(log.read_text().split("MEMSTATS ", 1)[1].splitlines()[0])


def _phases(text: str) -> dict[str, tuple[int, int, int]]:
    return {m[0]: (int(m[1]), int(m[2]), int(m[3]))
            for m in re.findall(r"^PHASE (\S+) (\d+) (\d+) (\d+)$", text, re.M)}


def test_memory_probe_matches_the_h200_reference(cli):
    log = REFERENCE / "gpt_small_memory" / "memory_probe.log"
    workloads = SHARED / "reference" / "workloads"
    if not log.exists() or not (workloads / "gpt.py").exists():
        pytest.skip("reference memory_probe log not available")
    r = cli("--no-trace", PY, str(SCRIPTS / "memory_probe_noprof.py"), str(workloads), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    real, sim = _phases(log.read_text()), _phases(r.stdout)
    assert list(sim) == list(real)
    for name, (alloc, reserved, peak) in real.items():
        s_alloc, s_reserved, s_peak = sim[name]
        assert abs(s_alloc - alloc) <= 0.001 * max(alloc, 1), (name, alloc, s_alloc)
        assert abs(s_peak - peak) <= 0.001 * max(peak, 1), (name, peak, s_peak)  # brief: 5%
        assert abs(s_reserved - reserved) <= 0.01 * max(reserved, 1), (name, reserved, s_reserved)
    assert sim["model"] == (498558976, 555745280, 498558976)
    stats = json.loads(r.stdout.split("MEMSTATS ", 1)[1].splitlines()[0])
    reference = _reference_memstats()
    assert set(stats) == set(reference)
    for key in ("segment.all.current", "num_device_alloc", "allocation.all.allocated", "active.all.peak"):
        assert stats[key] == reference[key], key


def test_streams_peak_matches_the_h200_reference(cli):
    script = SHARED / "reference" / "workloads" / "streams.py"
    if not script.exists():
        pytest.skip("reference workloads not available")
    r = cli("--no-trace", PY, str(script), "--steps", "4", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    peak = json.loads(r.stdout.split("RESULT ", 1)[1].splitlines()[0])["peak_mem_bytes"]
    assert abs(peak - 2081523200) <= 0.05 * 2081523200, peak
