"""DtoH copies, real or simulated (session 43, issue #15 / #14): `.cpu()` of 64 MiB into new host
memory (fresh pages) against `copy_` into a host tensor touched earlier, the same at 4 MiB, and a
non-blocking `.to("cpu")` (is its output pinned, how long until it returns and until it is done).
tests/test_e2e.py runs it under the simulator.

    python tools/holdout/d2h_probe.py            # on a GPU
    phantora-prof --no-trace python tools/holdout/d2h_probe.py

Prints `D2H {json}`: medians of 7 rounds in ms.
"""
import json
import statistics
import time

import torch


def main() -> None:
    x = torch.randn(16 << 20, device="cuda")  # 64 MiB
    dst = torch.empty(16 << 20)
    dst.copy_(x)
    rows: dict[str, list[float]] = {}
    pinned = None
    for _ in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = x.cpu()
        t1 = time.perf_counter()
        dst.copy_(x)
        t2 = time.perf_counter()
        x[: 1 << 20].cpu()
        t3a = time.perf_counter()
        dst[: 1 << 20].copy_(x[: 1 << 20])
        t3 = time.perf_counter()
        z = x.to("cpu", non_blocking=True)
        t4 = time.perf_counter()
        torch.cuda.synchronize()
        t5 = time.perf_counter()
        pinned = z.is_pinned()
        for k, v in (("cpu_64mib_fresh", t1 - t0), ("copy_64mib_reused", t2 - t1), ("cpu_4mib", t3a - t2), ("copy_4mib_reused", t3 - t3a),
                     ("nonblocking_return", t4 - t3), ("nonblocking_done", t5 - t3)):
            rows.setdefault(k, []).append(v * 1e3)
        del y, z
    out = {k: round(statistics.median(v), 3) for k, v in rows.items()}
    out["nonblocking_pinned"] = pinned
    print("D2H " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
