"""Simulated GPU memory: a model of PyTorch's CUDA caching allocator.

The policy is that of c10/cuda/CUDACachingAllocator.cpp (native backend), re-implemented here
block for block:

- Requests are rounded up to multiples of 512 B (or to power-of-two divisions with
  `PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:N`); a request of 0 bytes allocates nothing.
- Two pools: small (rounded size <= 1 MiB) and large.  A new segment ("cudaMalloc") is 2 MiB for
  the small pool, 20 MiB for large requests under 10 MiB, else the request rounded up to 2 MiB.
- Free blocks are kept per pool ordered by (stream, size, address); a request takes the best
  fit: the smallest free block of its stream that is large enough, lowest address first.  A
  block is split when the remainder is >= 512 B (small pool) or > 1 MiB (large pool, and only
  for requests below `max_split_size`); otherwise the whole block is handed out and
  `memory_allocated()` counts all of it (why a 4.5 MiB bf16 weight copy can show up as a 5.25 MiB
  allocation in the reference trace).
- `max_split_size_mb`: blocks at or above it are never split, a request below it never takes
  one, and a larger request takes a cached oversize block only within 20 MiB of its size.
- A freed block is merged with free neighbours of its segment.
- When no cached block fits and a new segment would not fit on the device (capacity less
  CONTEXT_BYTES for the CUDA context, or the `set_per_process_memory_fraction` limit), cached
  oversize blocks are released (only with max_split_size set), then every cached segment that
  is entirely free (`num_alloc_retries`), and the allocation is tried again; then it raises
  `torch.OutOfMemoryError` with the real message.  `empty_cache()` releases all entirely free
  segments.
- Streams: a block belongs to the stream it was allocated on; freed, it is reusable by that
  stream at once and never by another.  `record_stream(t, s)` marks it as used on another stream:
  freed, it stays active (not reusable) until that stream's work is done.  Approximation: the
  model does not see GPU completion, so such a block becomes reusable at the next host
  synchronization if the runtime reports those (`note_host_sync()`), otherwise at the next
  allocation (as if the other stream had caught up, which a synchronize per step guarantees).
- Statistics: every key of `torch.cuda.memory_stats()`, updated where the real allocator does.
- Device addresses: segments get simulated addresses handed out top down from ADDRESS_TOP, as the
  CUDA driver does (a newer segment has a lower address: this decides ties in the best fit, and
  with bottom-up addresses the reference run's placement was not reproduced); blocks carry
  them to the profiler's `[memory]` events through `AllocatorModel.on_event`.

Allocations an op makes besides its outputs are in runtime/device/op_allocations.py; the
torch.cuda memory API over these models in runtime/device/memory.py. Torch is imported only to
raise its OutOfMemoryError.
"""
from __future__ import annotations

import bisect
import collections
import os
import re
import threading
import weakref
from typing import Any, Callable

_MB = 1024 * 1024

K_MIN_BLOCK = 512  # all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1 * _MB  # largest "small" allocation
K_SMALL_BUFFER = 2 * _MB  # small allocations are packed in 2 MiB segments
K_LARGE_BUFFER = 20 * _MB  # requests between 1 and 10 MiB are packed in 20 MiB segments
K_MIN_LARGE_ALLOC = 10 * _MB
K_ROUND_LARGE = 2 * _MB  # larger segments are rounded up to 2 MiB
SIZE_MAX = (1 << 64) - 1

ADDRESS_TOP = 0x7FFE00000000  # the simulated device address space grows down from here
ADDRESS_DEVICE_STRIDE = 1 << 38  # 256 GiB of addresses per device
ADDRESS_ALIGN = 2 * _MB
# Device memory the CUDA context, kernels' modules and libraries' handles hold outside the
# caching allocator (what cudaMemGetInfo does not report as free before the first tensor);
# typical for a torch process on an H100/H200 with CUDA 12+ lazy module loading.
CONTEXT_BYTES = 512 * _MB

# kept for the first version's callers
SMALL_SIZE = K_SMALL_SIZE
SMALL_SEGMENT = K_SMALL_BUFFER
MEDIUM_SEGMENT = K_LARGE_BUFFER
MIN_LARGE_ALLOC = K_MIN_LARGE_ALLOC
ROUND = K_MIN_BLOCK

_STAT_ARRAYS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                "active_bytes", "inactive_split_bytes", "requested_bytes")
_POOLS = ("all", "small_pool", "large_pool")
_COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free")


# ---------------------------------------------------------------- configuration

class AllocatorConfig:
    """The parts of PYTORCH_CUDA_ALLOC_CONF the native allocator reads."""

    def __init__(self, conf: str | None = None):
        self.max_split_size = SIZE_MAX
        self.roundup_divisions = [0] * 16  # per power-of-two interval, 1 MiB .. 64 GiB
        self.expandable_segments = False
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") if conf is None else conf
        for key, value in _parse_conf(conf):
            if key == "max_split_size_mb":
                mb = int(value)
                if mb <= K_LARGE_BUFFER // _MB:
                    raise RuntimeError(f"CachingAllocator option max_split_size_mb too small, must be > "
                                       f"{K_LARGE_BUFFER // _MB}")
                self.max_split_size = mb * _MB
            elif key == "roundup_power2_divisions":
                self._parse_divisions(value)
            elif key == "expandable_segments":
                self.expandable_segments = value.lower() == "true"

    def _parse_divisions(self, value: str) -> None:
        value = value.strip()
        if not value.startswith("["):
            self.roundup_divisions = [int(value)] * 16
            return
        last = 0
        for item in value.strip("[]").split(","):
            if not item.strip():
                continue
            k, v = item.split(":")
            v = int(v)
            if k.strip() == ">":
                for i in range(last, 16):
                    self.roundup_divisions[i] = v
                continue
            mb = int(k)
            idx = max(0, mb.bit_length() - 1)
            idx = min(idx, 15)
            for i in range(last, idx + 1):
                self.roundup_divisions[i] = v
            last = idx + 1

    def divisions(self, size: int) -> int:
        log_size = size.bit_length() - 1
        start = (_MB).bit_length() - 1
        idx = log_size - start if log_size > start else 0
        return self.roundup_divisions[min(idx, 15)]


def _parse_conf(conf: str) -> list[tuple[str, str]]:
    out = []
    # "a:1,b:[256:1,>:2]" -> keys and values; brackets may contain commas
    for m in re.finditer(r"([A-Za-z_0-9.]+)\s*:\s*(\[[^\]]*\]|[^,\s]+)", conf):
        out.append((m.group(1), m.group(2)))
    return out


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    low = size & ~(step - 1)
    return size if low == size else low + step


def round_size(nbytes: int, config: AllocatorConfig | None = None) -> int:
    """The size the caching allocator hands out for a request (its `round_size`)."""
    if nbytes < K_MIN_BLOCK:
        return K_MIN_BLOCK
    if config is not None:
        div = config.divisions(nbytes)
        if div > 1 and nbytes > K_MIN_BLOCK * div:
            return _roundup_power2_next_division(nbytes, div)
    return K_MIN_BLOCK * ((nbytes + K_MIN_BLOCK - 1) // K_MIN_BLOCK)


def allocation_size(size: int) -> int:
    """The segment size cudaMalloc'ed for a rounded request that no cached block serves."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


segment_size = allocation_size  # the first version's name


def format_size(size: int) -> str:
    """c10's format_size: bytes, KiB, MiB or GiB with two decimals."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024.0:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"


def cublas_workspace_size(major: int = 9, minor: int = 0) -> int:
    """at::cuda::getChosenWorkspaceSize(): CUBLAS_WORKSPACE_CONFIG (":SIZE_KiB:COUNT" pairs), else
    32 MiB on sm90 and :4096:2:16:8 elsewhere."""
    default = 4096 * 8 * 1024 if (major, minor) == (9, 0) else 4096 * 1024 * 2 + 16 * 1024 * 8
    val = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if not val:
        return default
    pairs = re.findall(r":([0-9]+):([0-9]+)", val)
    if not pairs:
        return default
    return sum(int(s) * 1024 * int(c) for s, c in pairs)


def cublaslt_workspace_size(cublas_size: int) -> int:
    """at::cuda::getCUDABlasLtWorkspaceSize(): CUBLASLT_WORKSPACE_SIZE KiB (default 1024), capped at
    the cuBLAS workspace size."""
    try:
        kib = int(os.environ.get("CUBLASLT_WORKSPACE_SIZE", "1024"))
    except ValueError:
        kib = 1024
    return min(kib * 1024, cublas_size)


# ---------------------------------------------------------------- blocks and pools

class Block:
    """A piece of a segment: allocated, cached (free), or freed but pending other streams' work."""

    __slots__ = ("addr", "size", "requested", "stream", "small", "allocated", "prev", "next",
                 "stream_uses", "pending", "segment_base", "refs", "frames", "__weakref__")

    def __init__(self, addr: int, size: int, stream: int, small: bool, segment_base: int):
        self.addr = addr
        self.size = size
        self.requested = 0
        self.stream = stream
        self.small = small
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.stream_uses: set[int] = set()
        self.pending = False  # freed, waiting for recorded streams
        self.segment_base = segment_base
        self.refs = 0  # storages using the block (more than one where an in-place op was emulated)
        self.frames: list | None = None  # the stack that allocated it (memory history on)

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.stream, self.size, self.addr)

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else ("pending" if self.pending else "free")
        return f"Block(0x{self.addr:x}, {self.size}, stream={self.stream}, {state})"


class _Pool:
    """Cached free blocks ordered like BlockComparatorSize: (stream, size, address)."""

    __slots__ = ("small", "keys", "blocks")

    def __init__(self, small: bool):
        self.small = small
        self.keys: list[tuple[int, int, int]] = []
        self.blocks: dict[tuple[int, int, int], Block] = {}

    def insert(self, b: Block) -> None:
        k = b.key
        bisect.insort(self.keys, k)
        self.blocks[k] = b

    def remove(self, b: Block) -> None:
        k = b.key
        i = bisect.bisect_left(self.keys, k)
        if i < len(self.keys) and self.keys[i] == k:
            del self.keys[i]
            del self.blocks[k]

    def lower_bound(self, stream: int, size: int) -> Block | None:
        i = bisect.bisect_left(self.keys, (stream, size, -1))
        if i == len(self.keys):
            return None
        return self.blocks[self.keys[i]]

    def __iter__(self):
        return iter([self.blocks[k] for k in self.keys])

    def __len__(self) -> int:
        return len(self.keys)


class _Stat:
    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self):
        self.current = self.peak = self.allocated = self.freed = 0

    def inc(self, amount: int) -> None:
        self.current += amount
        if self.current > self.peak:
            self.peak = self.current
        self.allocated += amount

    def dec(self, amount: int) -> None:
        self.current -= amount
        self.freed += amount

    def as_dict(self) -> dict[str, int]:
        return {"allocated": self.allocated, "current": self.current, "freed": self.freed, "peak": self.peak}


class _AddressSpace:
    """Simulated virtual addresses for segments.  Like the CUDA driver's, they are handed out top
    down (a newer segment has a lower address), which matters: among free blocks of equal size
    the allocator takes the lowest address.  Released ranges are reused, highest first."""

    def __init__(self, top: int):
        self.bottom = top
        self.holes: list[tuple[int, int]] = []  # (addr, size), sorted by addr

    def take(self, size: int) -> int:
        size = ((size + ADDRESS_ALIGN - 1) // ADDRESS_ALIGN) * ADDRESS_ALIGN
        for i in range(len(self.holes) - 1, -1, -1):
            addr, hsize = self.holes[i]
            if hsize >= size:
                if hsize == size:
                    del self.holes[i]
                else:
                    self.holes[i] = (addr, hsize - size)
                return addr + hsize - size
        self.bottom -= size
        return self.bottom

    def give(self, addr: int, size: int) -> None:
        size = ((size + ADDRESS_ALIGN - 1) // ADDRESS_ALIGN) * ADDRESS_ALIGN
        bisect.insort(self.holes, (addr, size))
        merged: list[tuple[int, int]] = []
        for a, n in self.holes:
            if merged and merged[-1][0] + merged[-1][1] == a:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((a, n))
        if merged and merged[0][0] == self.bottom:
            self.bottom += merged.pop(0)[1]
        self.holes = merged


# ---------------------------------------------------------------- the allocator

class AllocatorModel:
    """One device's caching allocator.

    `on_event(addr, bytes_delta, total_allocated, total_reserved)` is called after every
    allocation (+block size) and free (-block size), as c10::reportMemoryUsageToProfiler is.
    """

    def __init__(self, capacity: int, device: int = 0, context_bytes: int = CONTEXT_BYTES,
                 config: AllocatorConfig | None = None, capability: tuple[int, int] = (9, 0)):
        self.capacity = capacity
        self.device = device
        self.context_bytes = min(context_bytes, capacity // 8)
        self.config = config or AllocatorConfig()
        self.capability = capability
        self.on_event: Callable[[int, int, int, int], None] | None = None
        self.current_stream: Callable[[], int] = lambda: 0
        self.allowed_memory_maximum: int | None = None  # set_per_process_memory_fraction
        self._lock = threading.RLock()
        self._dead_watch: dict[int, tuple[weakref.ref, Block]] = {}  # id(ref) -> (ref, block) per storage
        self._busy = False
        self._deferred: list[Block] = []
        self._small = _Pool(True)
        self._large = _Pool(False)
        self._active: set[Block] = set()  # allocated or pending
        self._pending: list[Block] = []
        self._segments: dict[int, Block] = {}  # base address -> head block (live segments)
        self._addresses = _AddressSpace(ADDRESS_TOP - device * ADDRESS_DEVICE_STRIDE)
        self._sync_aware = False
        self.total_reserved = 0  # total_allocated_memory of the real allocator
        self._stats = {name: {p: _Stat() for p in _POOLS} for name in _STAT_ARRAYS}
        self._stat_rows = {name: tuple(self._stats[name][p] for p in _POOLS) for name in _STAT_ARRAYS}
        self.oversize_allocations = _Stat()
        self.oversize_segments = _Stat()
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self._workspaces: dict[tuple[str, int, int], Block] = {}
        self.num_sms = 132  # for reductions' launch configuration
        # _record_memory_history (runtime/device/memory_history.py): its `record(device, action,
        # addr, size, stream)` is called where torch's allocator calls record_trace
        self.history: Any = None
        self._segment_frames: dict[int, list] = {}
        self._run_peaks = (0, 0)  # allocated, reserved peaks before the script's last reset_peak

    # -- the numbers torch.cuda reports
    @property
    def allocated(self) -> int:
        return self._stats["allocated_bytes"]["all"].current

    @property
    def peak_allocated(self) -> int:
        return self._stats["allocated_bytes"]["all"].peak

    @property
    def run_peak_allocated(self) -> int:
        """The peak over the whole run, whatever `reset_peak_memory_stats()` the script called."""
        return max(self._run_peaks[0], self.peak_allocated)

    @property
    def run_peak_reserved(self) -> int:
        return max(self._run_peaks[1], self.peak_reserved)

    @property
    def reserved(self) -> int:
        return self._stats["reserved_bytes"]["all"].current

    @property
    def peak_reserved(self) -> int:
        return self._stats["reserved_bytes"]["all"].peak

    @property
    def device_free(self) -> int:
        """What cudaMemGetInfo would report as free."""
        return max(0, self.capacity - self.context_bytes - self.total_reserved)

    # -- stats helpers
    def _inc(self, name: str, small: bool, amount: int) -> None:
        # _Stat.inc on "all" and on the pool's, written out: ~5 per allocation (issue #18)
        every, small_pool, large_pool = self._stat_rows[name]
        for st in (every, small_pool if small else large_pool):
            cur = st.current + amount
            st.current = cur
            if cur > st.peak:
                st.peak = cur
            st.allocated += amount

    def _dec(self, name: str, small: bool, amount: int) -> None:
        every, small_pool, large_pool = self._stat_rows[name]
        every.current -= amount
        every.freed += amount
        st = small_pool if small else large_pool
        st.current -= amount
        st.freed += amount

    # ---------------------------------------------------------------- malloc
    def malloc(self, nbytes: int, stream: int | None = None) -> Block | None:
        """Allocate `nbytes` on `stream` (the current stream if None); None for 0 bytes."""
        if nbytes <= 0:
            return None
        if nbytes >= 1 << 60:
            self._raise_oom_exabyte()
        if stream is None:
            stream = self.current_stream()
        with self._lock:
            self._busy = True
            try:
                return self._malloc(nbytes, stream)
            finally:
                self._busy = False
                self._run_deferred()

    def _malloc(self, orig: int, stream: int) -> Block:
        self._process_events(at_malloc=True)
        size = round_size(orig, self.config)
        small = size <= K_SMALL_SIZE
        pool = self._small if small else self._large
        alloc_size = allocation_size(size)
        block = self._get_free_block(pool, stream, size)
        if block is None:
            block = (self._alloc_block(pool, stream, alloc_size, retry=False)
                     or (self._release_available_cached_blocks(pool, stream, size)
                         and self._alloc_block(pool, stream, alloc_size, retry=False))
                     or (self._release_cached_blocks()
                         and self._alloc_block(pool, stream, alloc_size, retry=True)))
        if not block:
            self._oom(alloc_size)
        return self._alloc_found_block(block, pool, size, orig, stream)

    def _get_free_block(self, pool: _Pool, stream: int, size: int) -> Block | None:
        b = pool.lower_bound(stream, size)
        if b is None or b.stream != stream:
            return None
        mss = self.config.max_split_size
        if size < mss and b.size >= mss:
            return None  # do not return an oversized block for a smaller request
        if size >= mss and b.size >= size + K_LARGE_BUFFER:
            return None  # oversize blocks serve requests within 20 MiB of their size
        pool.remove(b)
        return b

    def _alloc_block(self, pool: _Pool, stream: int, alloc_size: int, retry: bool) -> Block | None:
        if retry:
            self.counters["num_alloc_retries"] += 1
        if self.allowed_memory_maximum is not None and self.total_reserved + alloc_size > self.allowed_memory_maximum:
            return None
        if alloc_size > self.device_free:
            return None
        addr = self._addresses.take(alloc_size)
        b = Block(addr, alloc_size, stream, pool.small, addr)
        if self.history is not None:
            frames = self.history.record(self.device, "segment_alloc", addr, alloc_size, stream)
            if frames is not None:
                self._segment_frames[addr] = frames
        self.total_reserved += alloc_size
        self._segments[addr] = b
        self._inc("segment", pool.small, 1)
        self._inc("reserved_bytes", pool.small, alloc_size)
        if alloc_size >= self.config.max_split_size:
            self.oversize_segments.inc(1)
        self.counters["num_device_alloc"] += 1
        return b

    def _should_split(self, b: Block, size: int) -> bool:
        remaining = b.size - size
        if b.small:
            return remaining >= K_MIN_BLOCK
        return size < self.config.max_split_size and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, b: Block, pool: _Pool, size: int, orig: int, stream: int) -> Block:
        already_split = b.is_split()
        if self._should_split(b, size):
            rest = b
            b = Block(rest.addr, size, stream, rest.small, rest.segment_base)
            b.prev = rest.prev
            if b.prev is not None:
                b.prev.next = b
            b.next = rest
            rest.prev = b
            if b.prev is None:
                self._segments[b.segment_base] = b
            rest.addr += size
            rest.size -= size
            pool.insert(rest)
            if already_split:
                self._dec("inactive_split_bytes", b.small, b.size)
            else:
                self._inc("inactive_split_bytes", b.small, rest.size)
                self._inc("inactive_split", b.small, 1)
        elif already_split:
            self._dec("inactive_split_bytes", b.small, b.size)
            self._dec("inactive_split", b.small, 1)
        b.allocated = True
        b.requested = orig
        self._active.add(b)
        self._inc("allocation", b.small, 1)
        self._inc("allocated_bytes", b.small, b.size)
        self._inc("active", b.small, 1)
        self._inc("active_bytes", b.small, b.size)
        self._inc("requested_bytes", b.small, orig)
        if b.size >= self.config.max_split_size:
            self.oversize_allocations.inc(1)
        if self.history is not None:
            b.frames = self.history.record(self.device, "alloc", b.addr, orig, stream)
        if self.on_event is not None:
            self.on_event(b.addr, b.size, self.allocated, self.reserved)
        return b

    # ---------------------------------------------------------------- free
    def free(self, block: Block | int | None) -> None:
        """Return a block (the caching allocator's free()).  An int frees the most recent live
        block of that rounded size (the first version's interface)."""
        if block is None:
            return
        with self._lock:
            if isinstance(block, int):
                block = self._find_live(block)
                if block is None:
                    return
            if not block.allocated:
                return
            if self._busy:  # a finalizer ran in the middle of an allocation: finish that first
                self._deferred.append(block)
                return
            self._free(block)

    def _find_live(self, size: int) -> Block | None:
        size = round_size(size, self.config)
        for b in sorted(self._active, key=lambda b: -b.addr):
            if b.allocated and b.size == size:
                return b
        return None

    def _run_deferred(self) -> None:
        while self._deferred:
            b = self._deferred.pop(0)
            if b.allocated:
                self._free(b)

    def _free(self, b: Block) -> None:
        b.allocated = False
        addr, size = b.addr, b.size
        if self.history is not None:
            self.history.record(self.device, "free_requested", addr, b.requested, b.stream)
        self._dec("allocation", b.small, 1)
        self._dec("allocated_bytes", b.small, b.size)
        if b.size >= self.config.max_split_size:
            self.oversize_allocations.dec(1)
        if b.stream_uses:
            b.stream_uses.clear()
            b.pending = True
            self._pending.append(b)
        else:
            self._free_block(b)
        if self.on_event is not None:
            self.on_event(addr, -size, self.allocated, self.reserved)

    def _free_block(self, b: Block) -> None:
        """Move a block into its pool of cached free blocks, merging it with free neighbours."""
        if self.history is not None:
            self.history.record(self.device, "free_completed", b.addr, b.requested, b.stream)
        b.frames = None
        b.pending = False
        pool = self._small if b.small else self._large
        orig_size, requested = b.size, b.requested
        net_blocks = 0
        net_bytes = 0
        for other in (b.prev, b.next):
            subsumed = self._try_merge(b, other, pool)
            if subsumed:
                net_blocks -= 1
                net_bytes -= subsumed
        self._active.discard(b)
        pool.insert(b)
        if b.is_split():
            net_blocks += 1
            net_bytes += b.size
        if net_blocks > 0:
            self._inc("inactive_split", b.small, net_blocks)
        elif net_blocks < 0:
            self._dec("inactive_split", b.small, -net_blocks)
        if net_bytes > 0:
            self._inc("inactive_split_bytes", b.small, net_bytes)
        elif net_bytes < 0:
            self._dec("inactive_split_bytes", b.small, -net_bytes)
        self._dec("active", b.small, 1)
        self._dec("active_bytes", b.small, orig_size)
        self._dec("requested_bytes", b.small, requested)

    def _try_merge(self, dst: Block, src: Block | None, pool: _Pool) -> int:
        segments = self._segments
        if src is None or src.allocated or src.pending:
            return 0
        pool.remove(src)
        if dst.prev is src:  # [src dst]
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
            else:
                segments[dst.segment_base] = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # ---------------------------------------------------------------- streams
    def record_stream(self, block: Block, stream: int) -> None:
        """Tensor.record_stream: the block is also used on `stream`."""
        with self._lock:
            if block.allocated and stream != block.stream:
                block.stream_uses.add(stream)

    def note_host_sync(self) -> None:
        """The host waited for GPU work (synchronize, event/stream sync, .item()): blocks freed
        while other streams used them become reusable."""
        with self._lock:
            self._sync_aware = True
            self._process_events(at_malloc=False)

    def _process_events(self, at_malloc: bool) -> None:
        if not self._pending or (at_malloc and self._sync_aware):
            return
        pending, self._pending = self._pending, []
        for b in pending:
            self._free_block(b)

    # ---------------------------------------------------------------- releasing segments
    def _release_block(self, b: Block) -> None:
        if self.history is not None:
            self.history.record(self.device, "segment_free", b.addr, b.size, b.stream)
        self._segment_frames.pop(b.addr, None)
        pool = self._small if b.small else self._large
        pool.remove(b)
        self.counters["num_device_free"] += 1
        self.total_reserved -= b.size
        self._segments.pop(b.addr, None)
        self._addresses.give(b.addr, b.size)
        self._dec("segment", b.small, 1)
        self._dec("reserved_bytes", b.small, b.size)
        if b.size >= self.config.max_split_size:
            self.oversize_segments.dec(1)

    def _release_available_cached_blocks(self, pool: _Pool, stream: int, size: int) -> bool:
        """Free cached oversize blocks (only with max_split_size set), just enough for `size`."""
        mss = self.config.max_split_size
        if mss == SIZE_MAX:
            return False
        key_size = max(size, mss)
        i = bisect.bisect_left(pool.keys, (stream, key_size, -1))
        if i == len(pool.keys) or pool.keys[i][0] != stream:
            if i == 0:
                return False
            released = 0
            i -= 1
            while released < key_size and i >= 0:
                b = pool.blocks[pool.keys[i]]
                if b.size < mss or b.stream != stream:
                    break
                released += b.size
                if not b.is_split():
                    self._release_block(b)
                i -= 1
            return released >= key_size
        b = pool.blocks[pool.keys[i]]
        if not b.is_split():
            self._release_block(b)
        return True

    def _release_cached_blocks(self) -> bool:
        """Wait for all streams, then free every cached segment that is entirely free."""
        self.counters["num_sync_all_streams"] += 1
        pending, self._pending = self._pending, []
        for b in pending:
            self._free_block(b)
        for pool in (self._large, self._small):
            for b in list(pool):
                if not b.is_split():
                    self._release_block(b)
        return True

    def empty_cache(self) -> None:
        with self._lock:
            self._release_cached_blocks()

    # ---------------------------------------------------------------- OOM
    def _oom(self, alloc_size: int) -> None:
        self.counters["num_ooms"] += 1
        allocated, reserved = self.allocated, self.reserved
        free = self.device_free
        if self.history is not None:
            self.history.record(self.device, "oom", free, alloc_size, self.current_stream())
        if self.allowed_memory_maximum is not None:
            allowed = f"{format_size(self.allowed_memory_maximum)} allowed; "
        else:
            allowed = ""
        proc = (f"Including non-PyTorch memory, this process has "
                f"{format_size(self.total_reserved + self.context_bytes)} memory in use. ")
        msg = (f"CUDA out of memory. Tried to allocate {format_size(alloc_size)}. GPU {self.device} has a "
               f"total capacity of {format_size(self.capacity)} of which {format_size(free)} is free. {proc}"
               f"{allowed}Of the allocated memory {format_size(allocated)} is allocated by PyTorch, and "
               f"{format_size(reserved - allocated)} is reserved by PyTorch but unallocated. If reserved but "
               f"unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
               f"avoid fragmentation.  See documentation for Memory Management  "
               f"(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
        raise _oom_error(msg)

    @staticmethod
    def _raise_oom_exabyte() -> None:
        raise _oom_error("CUDA out of memory. Tried to allocate more than 1EB memory.")

    # ---------------------------------------------------------------- tensors
    def track_storage(self, storage: Any, nbytes: int, stream: int | None = None) -> Block | None:
        """A new CUDA storage of `nbytes`: allocate its block now, free it when the storage dies."""
        block = self.malloc(nbytes, stream)
        if block is None:
            return None
        self._attach(storage, block)
        return block

    def share_storage(self, storage: Any, source: Any) -> Block | None:
        """`storage` takes over the block of `source` (another live storage), as when the real
        program would have written in place into `source`; the block is freed when both died."""
        block = getattr(source, "_phantora_block", None)
        if block is None or not block.allocated or block.refs < 1:
            return None
        self._attach(storage, block)
        return block

    def _attach(self, storage: Any, block: Block) -> None:
        block.refs += 1
        try:
            storage._phantora_block = block
        except (AttributeError, TypeError):
            pass
        # A weakref callback, not weakref.finalize: finalize's __call__ is stdlib Python that the
        # host model would count as the program's work (real storages are freed in C++).
        ref = weakref.ref(storage, self._storage_died)
        self._dead_watch[id(ref)] = (ref, block)

    def _storage_died(self, ref: weakref.ref) -> None:
        quiet = _SIMULATOR_SECTION
        if quiet is not None:
            quiet[0]()  # the program's Python hook off (runtime/host/pyhost.py): this is the simulator's work
        try:
            entry = self._dead_watch.pop(id(ref), None)
            if entry is not None:
                self._release(entry[1])
        finally:
            if quiet is not None:
                quiet[1]()

    def _release(self, block: Block) -> None:
        with self._lock:
            block.refs -= 1
            last = block.refs <= 0
        if last:
            self.free(block)

    def allocate(self, nbytes: int, stream: int | None = None) -> Block | None:
        """A raw allocation (caching_allocator_alloc); give it back with free()."""
        return self.malloc(nbytes, stream)

    def workspace(self, kind: str, nbytes: int, stream: int | None = None, thread: int | None = None) -> None:
        """A library workspace held for the life of the process, one per (kind, thread, stream),
        allocated the first time it is asked for (cuBLAS / cuBLASLt handles' workspaces)."""
        if stream is None:
            stream = self.current_stream()
        if thread is None:
            thread = threading.get_ident()
        key = (kind, thread, stream)
        with self._lock:
            if key in self._workspaces:
                return
            block = self.malloc(nbytes, stream)
            if block is not None:
                self._workspaces[key] = block

    def gemm(self, lt: bool = False, stream: int | None = None) -> None:
        """A cuBLAS GEMM ran on the current thread and stream (lt: through cuBLASLt)."""
        size = cublas_workspace_size(*self.capability)
        self.workspace("cublas", size, stream)
        if lt:
            self.workspace("cublaslt", cublaslt_workspace_size(size), stream)

    def transient(self, nbytes: int, stream: int | None = None) -> None:
        """A scratch buffer an op takes and gives back before it returns (library workspaces)."""
        block = self.malloc(nbytes, stream)
        if block is not None:
            self.free(block)

    # ---------------------------------------------------------------- reporting
    def reset_peak(self) -> None:
        with self._lock:
            # the run's own peaks survive the script's resets (the summary reports the run)
            self._run_peaks = (self.run_peak_allocated, self.run_peak_reserved)
            for arr in self._stats.values():
                for s in arr.values():
                    s.peak = s.current
            self.oversize_allocations.peak = self.oversize_allocations.current
            self.oversize_segments.peak = self.oversize_segments.current

    def reset_accumulated(self) -> None:
        with self._lock:
            for arr in self._stats.values():
                for s in arr.values():
                    s.allocated = s.freed = 0
            for s in (self.oversize_allocations, self.oversize_segments):
                s.allocated = s.freed = 0
            for k in self.counters:
                self.counters[k] = 0

    def nested_stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = {}
            for name, arr in self._stats.items():
                out[name] = {p: arr[p].as_dict() for p in _POOLS}
            out.update(self.counters)
            out["oversize_allocations"] = self.oversize_allocations.as_dict()
            out["oversize_segments"] = self.oversize_segments.as_dict()
            mss = self.config.max_split_size
            out["max_split_size"] = -1 if mss == SIZE_MAX else mss
            return out

    def stats_dict(self) -> "collections.OrderedDict[str, int]":
        """torch.cuda.memory_stats(): the nested stats flattened with '.', keys sorted."""
        flat: list[tuple[str, int]] = []

        def walk(prefix: str, obj: Any) -> None:
            if isinstance(obj, dict):
                for k, v in obj.items():
                    walk(f"{prefix}.{k}" if prefix else k, v)
            else:
                flat.append((prefix, obj))

        walk("", self.nested_stats())
        flat.sort()
        return collections.OrderedDict(flat)

    def stats(self) -> "collections.OrderedDict[str, int]":
        """The same as stats_dict() (the first version's name)."""
        return self.stats_dict()

    def snapshot(self) -> list[dict[str, Any]]:
        """torch.cuda.memory_snapshot(): one dict per segment with its blocks."""
        with self._lock:
            out = []
            for base in sorted(self._segments):
                head = self._segments[base]
                blocks = []
                b: Block | None = head
                total = alloc = active = requested = 0
                while b is not None:
                    state = "active_allocated" if b.allocated else ("active_pending_free" if b.pending else "inactive")
                    blocks.append({"address": b.addr, "size": b.size, "requested_size": b.requested,
                                   "state": state, "frames": list(b.frames or ())})
                    total += b.size
                    if b.allocated:
                        alloc += b.size
                    if b.allocated or b.pending:
                        active += b.size
                        requested += b.requested
                    b = b.next
                out.append({"device": self.device, "address": base, "total_size": total, "allocated_size": alloc,
                            "active_size": active, "requested_size": requested, "stream": head.stream,
                            "segment_type": "small" if head.small else "large", "segment_pool_id": (0, 0),
                            "is_expandable": False, "frames": list(self._segment_frames.get(base, ())),
                            "blocks": blocks})
            return out

    def check(self) -> None:
        """Internal consistency (tests): segments tile exactly, pools hold exactly the free blocks,
        and the byte counters agree with the blocks."""
        allocated = reserved = 0
        for base, head in self._segments.items():
            assert head.prev is None and head.addr == base
            b: Block | None = head
            addr = base
            prev_free = False
            while b is not None:
                assert b.addr == addr, (b, addr)
                free = not b.allocated and not b.pending
                assert not (free and prev_free), "two adjacent free blocks were not merged"
                pool = self._small if b.small else self._large
                assert (b.key in pool.blocks) == free, b
                if b.allocated:
                    allocated += b.size
                addr += b.size
                reserved += b.size
                prev_free = free
                b = b.next
        assert allocated == self.allocated, (allocated, self.allocated)
        assert reserved == self.reserved == self.total_reserved, (reserved, self.reserved)


def _oom_error(msg: str) -> Exception:
    try:
        import torch

        return torch.OutOfMemoryError(msg)
    except (ImportError, AttributeError):  # pragma: no cover - torch without the type
        return MemoryError(msg)


# ---------------------------------------------------------------- per-device models

_models: dict[int, AllocatorModel] = {}  # device -> its allocator (runtime/device/memory.py's api() makes them)
# (pause, resume) of the host model's Python hook (runtime/host/pyhost.py) when it runs: a
# storage's death callback fires from C++ wherever the program is, with the hook on, and
# the simulator's Python would otherwise run on CPython's slow tracing path (issue #18)
_SIMULATOR_SECTION: tuple[Callable[[], None], Callable[[], None]] | None = None


def set_simulator_section(pause: Callable[[], None] | None, resume: Callable[[], None] | None) -> None:
    global _SIMULATOR_SECTION
    _SIMULATOR_SECTION = None if pause is None or resume is None else (pause, resume)


def model(device: int = 0) -> AllocatorModel:
    m = _models.get(device)
    if m is None:
        if _models:  # `cuda:3` on a process that sees fewer GPUs: the CUDA runtime's error
            raise invalid_device_ordinal(device, len(_models))
        raise RuntimeError("simulated memory is not initialised")
    return m


def invalid_device_ordinal(index: int, count: int) -> RuntimeError:
    """What torch raises for a device index the process cannot see (cudaErrorInvalidDevice,
    c10/cuda/CUDAException's text), with the simulated GPU count the script may have meant
    to change. Raised where memory is asked of such a device, and by RuntimeState.device_index
    (torch.cuda.set_device, device guards)."""
    import torch

    kind = getattr(torch, "AcceleratorError", RuntimeError)  # torch >= 2.8 raises this RuntimeError subclass
    return kind("CUDA error: invalid device ordinal\n"
                "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
                f"(phantora-prof: cuda:{index} is not one of the {count} simulated GPU(s) this process sees; "
                "see --nproc-per-node / --gpus-per-node)\n")
