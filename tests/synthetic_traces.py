"""Synthetic multi-rank `RankTrace`s shaped like a simulated DDP run (tests and benchmarks).

Per step on each rank: a `ProfilerStep#N` annotation enclosing forward ops (cpu_op ->
cudaLaunchKernel -> kernel on stream 7, with ac2g flows), a gradient all-reduce per step
(record_param_comms + an NCCL kernel on stream 20 carrying the collective args the engine
writes), an optimizer op, a cudaDeviceSynchronize, and `[memory]` instants.
"""
from __future__ import annotations

from tracing.model import Flow, FlowEnd, Instant, RankTrace, Span

BASE = 1_790_000_000_000_000_000
H200 = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150_000_000_000, "computeMajor": 9, "computeMinor": 0,
        "maxThreadsPerBlock": 1024, "numSms": 132}


def synthetic_rank(rank: int, world: int, steps: int = 2, ops_per_step: int = 6, memory: bool = True) -> RankTrace:
    host_pid = 100 + rank
    main = host_pid
    tr = RankTrace(rank=rank, host_pid=host_pid, base_time_ns=BASE, device_properties=[H200],
                   host_threads={main: f"thread {main} (python3)"}, gpu_streams={0: [7, 20]},
                   distributed_info={"backend": "nccl", "rank": rank, "world_size": world, "pg_count": 1,
                                     "pg_config": [], "nccl_version": "2.27.5"},
                   trace_name=f"rank{rank}", profile_memory=memory)
    t = 1_000_000 + 37 * rank  # host ns
    gpu_t = t
    corr = 1
    ext = 1
    alloc = 1 << 30
    for step in range(steps):
        step_start = t
        step_spans: list[Span] = []
        t += 500
        for k in range(ops_per_step):
            name = "aten::mm" if k % 2 == 0 else "aten::add"
            op_start = t
            launch = op_start + 1_200
            kernel_start = max(launch + 2_500, gpu_t)
            kdur = 40_000 + 1_000 * k
            tr.spans.append(Span("cuda_runtime", "cudaLaunchKernel", main, launch, 3_000,
                                 {"External id": ext, "cbid": 211, "correlation": corr}))
            tr.spans.append(Span("kernel", f"sm90_xmma_gemm_{k}" if k % 2 == 0 else "elementwise_kernel", 7,
                                 kernel_start, kdur, {"External id": ext, "queued": 0, "device": 0, "context": 1,
                                                      "stream": 7, "correlation": corr, "registers per thread": 96,
                                                      "blocks per SM": 0.5, "grid": [132, 1, 1],
                                                      "block": [256, 1, 1], "est. achieved occupancy %": 0},
                                 on_gpu=True, device=0))
            tr.flows.append(Flow("ac2g", corr, FlowEnd(False, main, launch), FlowEnd(True, 7, kernel_start, 0)))
            step_spans.append(Span("cpu_op", name, main, op_start, 6_000,
                                   {"External id": ext, "Record function id": 0, "Input Dims": [[8, 1024], [1024]],
                                    "Input type": ["c10::BFloat16", ""], "Input Strides": [[1024, 1], []],
                                    "Concrete Inputs": ["", ""], "Ev Idx": k}))
            if memory:
                alloc += 4096 * (k + 1)
                tr.instants.append(Instant("cpu_instant_event", "[memory]", main, op_start + 100, {
                    "Total Reserved": 2 << 30, "Total Allocated": alloc, "Bytes": 4096 * (k + 1), "Device Id": 0,
                    "Device Type": 1, "Addr": 0x7F0000000000 + 4096 * k, "finished": False}))
            corr += 1
            ext += 1
            gpu_t = kernel_start + kdur
            t = op_start + 7_000
        # gradient all-reduce: cpu_op + record_param_comms + annotation + NCCL kernel on stream 20
        c_start = t
        launch = c_start + 2_000
        kstart = max(gpu_t, 2_000_000 * (step + 1) + 500_000)  # same start on every rank
        kdur = 150_000
        coll = {"Collective name": "allreduce", "Process Group Description": "default_pg", "dtype": "Float",
                "Rank": rank, "Out msg nelems": 1 << 20, "Process Group Name": "0", "Global rank stride": 1,
                "Out split size": "[]", "In split size": "[]", "Process Group Ranks": str(list(range(world))),
                "Group size": world, "Global rank start": 0, "In msg nelems": 1 << 20}
        step_spans.append(Span("cpu_op", "c10d::allreduce_", main, c_start, 6_000, {"External id": ext}))
        step_spans.append(Span("cpu_op", "record_param_comms", main, c_start + 1_000, 4_000,
                               {"External id": ext + 1, **coll}))
        tr.spans.append(Span("cuda_driver", "cuLaunchKernelEx", main, launch, 1_500,
                             {"External id": ext + 1, "cbid": 307, "correlation": corr}))
        tr.spans.append(Span("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                             20, kstart, kdur, {"External id": ext + 1, "device": 0, "stream": 20,
                                                "correlation": corr, **coll}, on_gpu=True, device=0))
        tr.flows.append(Flow("ac2g", corr, FlowEnd(False, main, launch), FlowEnd(True, 20, kstart, 0)))
        tr.spans.append(Span("gpu_user_annotation", "nccl:all_reduce", 20, kstart, kdur,
                             {"External id": ext + 2}, on_gpu=True, device=0))
        corr += 1
        ext += 3
        t = c_start + 7_000
        sync_end = max(t + 1_000, kstart + kdur + 2_000)
        tr.spans.append(Span("cuda_runtime", "cudaDeviceSynchronize", main, t, sync_end - t,
                             {"External id": ext, "cbid": 165, "correlation": corr}))
        corr += 1
        ext += 1
        t = sync_end + 500
        gpu_t = kstart + kdur
        tr.spans.append(Span("user_annotation", f"ProfilerStep#{step}", main, step_start, t - step_start,
                             {"External id": ext}))
        ext += 1
        tr.spans.extend(step_spans)
        t += 1_000
    return tr


def synthetic_run(world: int, **kw) -> list[RankTrace]:
    return [synthetic_rank(r, world, **kw) for r in range(world)]
