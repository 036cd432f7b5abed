"""Simulated GPU models: datasheet peaks and the properties a real device reports.

Every number has a source. Peak FLOP/s are *dense* (no 2:4 sparsity) tensor-core rates at
boost clock from NVIDIA's datasheets:

- H100 SXM5 80GB: NVIDIA H100 Tensor Core GPU datasheet (2023): FP64 34 TF, FP64 tensor
  67 TF, FP32 67 TF, TF32 494.7 TF, BF16/FP16 989.4 TF, FP8 1978.9 TF; HBM3 3.35 TB/s;
  132 SMs; 50 MB L2.
- H200 SXM 141GB: NVIDIA H200 datasheet (2024): same GH100 compute as H100 SXM;
  HBM3e 4.8 TB/s, 141 GB. The reference machine (shared/reference/h200/env.txt) reports
  totalGlobalMem 150109880320 bytes (torch: total_memory=143155MB), 132 SMs, L2 60 MB,
  max SM clock 1980 MHz, memory clock 3201 MHz.
- A100 SXM4 80GB: NVIDIA A100 datasheet (2021): FP64 9.7 TF, FP64 tensor 19.5 TF, FP32
  19.5 TF, TF32 156 TF, BF16/FP16 312 TF; HBM2e 2.039 TB/s; 108 SMs; 40 MB L2.

`memory_bytes` is cudaDeviceProp.totalGlobalMem as the driver reports it (a little less
than the marketing capacity, and it varies slightly with the driver): H200 from the
reference machine; H100 85017755648 (deviceQuery, driver 13.0 / runtime 12.5); A100
84987740160 (deviceQuery, driver 12.2).

Host<->device copy bandwidths are calibrated on the H200 reference (shared/reference/h200/
streams: 64 MiB pageable HtoD at 7.0 and 8.1 GB/s, pinned HtoD 53.2 GB/s, DtoD 1918-2003
GB/s as the profiler counts it, i.e. bytes copied / time; 4-byte DtoH into pinned memory
takes ~1.95 us). H100 SXM sits on the same PCIe Gen5 x16; A100 on PCIe Gen4 x16 (pinned
~24 GB/s in bandwidthTest), so its pinned rates are scaled by half.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from phantora_prof.errors import ConfigError

TFLOP = 1e12
TB = 1e12
GB = 1e9
MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str  # as cudaDeviceProp.name: "NVIDIA H200"
    key: str  # short table key: "h200"
    # dense peak FLOP/s per math mode (fp32 = non-tensor FMA pipes; fp64 = FP64 tensor cores)
    bf16_flops: float
    fp16_flops: float
    tf32_flops: float
    fp32_flops: float
    fp64_flops: float
    fp8_flops: float  # 0.0 when the GPU has no FP8 tensor cores
    hbm_bandwidth: float  # bytes/s
    num_sms: int
    memory_bytes: int  # totalGlobalMem
    compute_capability: tuple[int, int]
    l2_cache_bytes: int
    sm_clock_mhz: int = 1980
    memory_clock_mhz: int = 2619
    memory_bus_width: int = 5120
    # cudaDeviceProp fields torch.profiler writes into "deviceProperties"
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    regs_per_block: int = 65536
    regs_per_sm: int = 65536
    warp_size: int = 32
    shared_mem_per_block: int = 49152
    shared_mem_per_block_optin: int = 232448
    shared_mem_per_sm: int = 233472
    # host <-> device copies (bytes/s) and the fixed cost of one copy (ns)
    h2d_pinned_bw: float = 53.2 * GB
    h2d_pageable_bw: float = 7.5 * GB
    d2h_pinned_bw: float = 53.2 * GB
    d2h_pageable_bw: float = 7.5 * GB
    memcpy_latency_ns: int = 1900
    p2p_bandwidth: float = 370 * GB  # cudaMemcpyPeer over NVLink (H100/H200 NVLink4)
    aliases: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.name or not self.key:
            raise ConfigError("GpuSpec needs a name and a key (e.g. 'NVIDIA H200', 'h200')")
        if self.key != self.key.lower():
            raise ConfigError(f"GpuSpec key {self.key!r} must be lower case")
        for f in ("bf16_flops", "fp16_flops", "tf32_flops", "fp32_flops", "fp64_flops",
                  "hbm_bandwidth", "h2d_pinned_bw", "h2d_pageable_bw", "d2h_pinned_bw",
                  "d2h_pageable_bw", "p2p_bandwidth"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(f"GPU {self.key}: {f} must be a positive number, got {v!r}")
        if self.fp8_flops < 0:
            raise ConfigError(f"GPU {self.key}: fp8_flops must be >= 0 (0 = no FP8)")
        for f in ("num_sms", "memory_bytes", "l2_cache_bytes", "max_threads_per_block",
                  "max_threads_per_sm", "regs_per_block", "regs_per_sm", "warp_size",
                  "shared_mem_per_block", "shared_mem_per_block_optin", "shared_mem_per_sm",
                  "sm_clock_mhz", "memory_clock_mhz", "memory_bus_width"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"GPU {self.key}: {f} must be a positive integer, got {v!r}")
        if self.memcpy_latency_ns < 0:
            raise ConfigError(f"GPU {self.key}: memcpy_latency_ns must be >= 0")
        cc = self.compute_capability
        if (not isinstance(cc, tuple) or len(cc) != 2
                or not all(isinstance(x, int) and x >= 0 for x in cc)):
            raise ConfigError(f"GPU {self.key}: compute_capability must be (major, minor), got {cc!r}")
        if self.fp32_flops > self.bf16_flops:
            raise ConfigError(f"GPU {self.key}: fp32 peak above bf16 peak; check the units (FLOP/s)")

    # ---- peaks ----

    @property
    def arch(self) -> str:
        """"sm90", "sm80": the kernel-name family this GPU runs."""
        return f"sm{self.compute_capability[0]}{self.compute_capability[1]}"

    def peak_flops(self, dtype: str, allow_tf32: bool = False) -> float:
        """Dense peak FLOP/s for a matmul whose inputs have `dtype`."""
        if dtype == "bfloat16":
            return self.bf16_flops
        if dtype == "float16":
            return self.fp16_flops
        if dtype == "float32":
            return self.tf32_flops if allow_tf32 else self.fp32_flops
        if dtype.startswith("float8"):
            return self.fp8_flops or self.bf16_flops
        if dtype in ("float64", "complex128"):
            return self.fp64_flops
        if dtype in ("int8", "uint8"):
            return self.fp8_flops or self.bf16_flops  # int8 tensor rate = fp8 rate on Hopper
        return self.fp32_flops

    # ---- what a real device reports ----

    def device_properties(self, index: int = 0) -> dict:
        """The "deviceProperties" entry torch.profiler writes (same keys, same order)."""
        return {
            "id": index,
            "name": self.name,
            "totalGlobalMem": self.memory_bytes,
            "computeMajor": self.compute_capability[0],
            "computeMinor": self.compute_capability[1],
            "maxThreadsPerBlock": self.max_threads_per_block,
            "maxThreadsPerMultiprocessor": self.max_threads_per_sm,
            "regsPerBlock": self.regs_per_block,
            "warpSize": self.warp_size,
            "sharedMemPerBlock": self.shared_mem_per_block,
            "numSms": self.num_sms,
            "regsPerMultiprocessor": self.regs_per_sm,
            "sharedMemPerBlockOptin": self.shared_mem_per_block_optin,
            "sharedMemPerMultiprocessor": self.shared_mem_per_sm,
        }

    def cuda_properties(self, index: int = 0) -> dict:
        """What torch.cuda.get_device_properties(index) exposes (attribute -> value).

        total_memory is in bytes (torch prints it as MB = bytes // 2**20 in the repr);
        uuid and pci ids are synthetic but stable per index.
        """
        return {
            "name": self.name,
            "major": self.compute_capability[0],
            "minor": self.compute_capability[1],
            "total_memory": self.memory_bytes,
            "multi_processor_count": self.num_sms,
            "is_integrated": 0,
            "is_multi_gpu_board": 0,
            "max_threads_per_multi_processor": self.max_threads_per_sm,
            "warp_size": self.warp_size,
            "regs_per_multiprocessor": self.regs_per_sm,
            "shared_memory_per_block": self.shared_mem_per_block,
            "shared_memory_per_block_optin": self.shared_mem_per_block_optin,
            "shared_memory_per_multiprocessor": self.shared_mem_per_sm,
            "L2_cache_size": self.l2_cache_bytes,
            "clock_rate": self.sm_clock_mhz * 1000,  # kHz, as cudaDeviceProp.clockRate
            "memory_clock_rate": self.memory_clock_mhz * 1000,  # kHz
            "memory_bus_width": self.memory_bus_width,
            "gcnArchName": self.name,
            "uuid": f"5048414e-544f-5241-{self.compute_capability[0]:02x}{self.compute_capability[1]:02x}-{index:012x}",
            "pci_bus_id": index,
            "pci_device_id": 0,
            "pci_domain_id": 0,
        }


H100 = GpuSpec(
    name="NVIDIA H100 80GB HBM3",
    key="h100",
    bf16_flops=989.4 * TFLOP,
    fp16_flops=989.4 * TFLOP,
    tf32_flops=494.7 * TFLOP,
    fp32_flops=66.9 * TFLOP,
    fp64_flops=66.9 * TFLOP,
    fp8_flops=1978.9 * TFLOP,
    hbm_bandwidth=3.35 * TB,
    num_sms=132,
    memory_bytes=85017755648,
    compute_capability=(9, 0),
    l2_cache_bytes=50 * MiB,
    sm_clock_mhz=1980,
    memory_clock_mhz=2619,
    aliases=("h100-sxm", "h100-sxm5", "h100-80gb", "h100 80gb hbm3", "nvidia h100 80gb hbm3"),
)

H200 = GpuSpec(
    name="NVIDIA H200",
    key="h200",
    bf16_flops=989.4 * TFLOP,
    fp16_flops=989.4 * TFLOP,
    tf32_flops=494.7 * TFLOP,
    fp32_flops=66.9 * TFLOP,
    fp64_flops=66.9 * TFLOP,
    fp8_flops=1978.9 * TFLOP,
    hbm_bandwidth=4.8 * TB,
    num_sms=132,
    memory_bytes=150109880320,
    compute_capability=(9, 0),
    l2_cache_bytes=60 * MiB,
    sm_clock_mhz=1980,
    memory_clock_mhz=3201,
    aliases=("h200-sxm", "h200-141gb", "nvidia h200"),
)

A100 = GpuSpec(
    name="NVIDIA A100-SXM4-80GB",
    key="a100",
    bf16_flops=312.0 * TFLOP,
    fp16_flops=312.0 * TFLOP,
    tf32_flops=156.0 * TFLOP,
    fp32_flops=19.5 * TFLOP,
    fp64_flops=19.5 * TFLOP,
    fp8_flops=0.0,
    hbm_bandwidth=2.039 * TB,
    num_sms=108,
    memory_bytes=84987740160,
    compute_capability=(8, 0),
    l2_cache_bytes=40 * MiB,
    sm_clock_mhz=1410,
    memory_clock_mhz=1593,
    shared_mem_per_block_optin=166912,
    shared_mem_per_sm=167936,
    h2d_pinned_bw=24.0 * GB,
    d2h_pinned_bw=24.0 * GB,
    h2d_pageable_bw=6.0 * GB,
    d2h_pageable_bw=6.0 * GB,
    memcpy_latency_ns=2200,
    p2p_bandwidth=230 * GB,
    aliases=("a100-80gb", "a100-sxm4-80gb", "a100-sxm", "a100-sxm4", "nvidia a100-sxm4-80gb"),
)

GPUS: dict[str, GpuSpec] = {g.key: g for g in (H200, H100, A100)}
DEFAULT_GPU = "h200"

_ALIASES: dict[str, str] = {}
for _g in GPUS.values():
    _ALIASES[_g.key] = _g.key
    _ALIASES[_g.name.lower()] = _g.key
    for _a in _g.aliases:
        _ALIASES[_a] = _g.key


def get_gpu(name: str | GpuSpec | None = None) -> GpuSpec:
    """Look a GPU up by key or alias: "h200", "H200", "nvidia-h200", "a100-80gb", ...

    None gives the default (h200). Raises ConfigError naming the known GPUs otherwise.
    """
    if isinstance(name, GpuSpec):
        return name
    if name is None:
        return GPUS[DEFAULT_GPU]
    if not isinstance(name, str):
        raise ConfigError(f"GPU name must be a string, got {type(name).__name__}")
    s = name.strip().lower().replace("_", "-")
    candidates = [s, s.replace(" ", "-"), s.replace("-", " ")]
    for c in list(candidates):
        if c.startswith("nvidia-") or c.startswith("nvidia "):
            candidates.append(c[7:])
    for c in candidates:
        if c in _ALIASES:
            return GPUS[_ALIASES[c]]
    known = ", ".join(sorted(GPUS))
    raise ConfigError(
        f"unknown GPU {name!r}; known GPUs: {known} "
        f"(aliases such as 'H200', 'nvidia-h200', 'a100-80gb' also work)"
    )
