"""The measuring worker: `python -m phantora_prof.measure.worker`, one JSON request per line.

Protocol (stdin -> stdout, one JSON object per line): the worker first prints
{"ready": true, "device": {...}} (or {"fatal": "why"} and exits); then for every
{"id": n, "sig": {...}, "repeats": r, "warmup": w} it answers
{"id": n, "kernels": [...], "reps": k} or {"id": n, "error": "why"}.
Everything else the process prints goes to stderr, so the protocol stream stays clean.
Measurements of several workers (one per simulated rank) take a machine-wide file lock,
so two never time kernels on the GPU at once.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile


def lock_path() -> str:
    return os.environ.get("PHANTORA_MEASURE_LOCK") or os.path.join(tempfile.gettempdir(),
                                                                   f"phantora-measure-{os.getuid()}.lock")


def main() -> int:
    proto = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints of torch/CUDA go to stderr

    def send(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    test_cpu = os.environ.get("PHANTORA_MEASURE_DEVICE") == "cpu"  # tests only: CPU times, see replay.measure_cpu
    try:
        import torch

        if test_cpu:
            from phantora_prof.measure import replay

            send({"ready": True, "device": {"name": "CPU (test mode: CPU times, not a GPU's)",
                                            "torch": torch.__version__, "cuda": None, "capability": []}})
        elif not torch.cuda.is_available():
            send({"fatal": "no CUDA device is visible to torch in this process "
                           f"(torch {torch.__version__}, CUDA {torch.version.cuda}); measuring needs a real GPU"})
            return 1
        else:
            from phantora_prof.measure import replay

            torch.cuda.init()
            send({"ready": True, "device": replay.device_info()})
    except Exception as e:  # noqa: BLE001 - tell the client why, in one line
        send({"fatal": f"{type(e).__name__}: {e}"})
        return 1
    lock = open(lock_path(), "a+")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        rid = req.get("id")
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            fn = replay.measure_cpu if test_cpu else replay.measure
            res = fn(req["sig"], repeats=int(req.get("repeats", 5)), warmup=int(req.get("warmup", 2)))
            send({"id": rid, **res})
        except Exception as e:  # noqa: BLE001 - one op that cannot be replayed is reported, not fatal
            msg = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            send({"id": rid, "error": msg})
            if "CUDA error" in msg or "device-side assert" in msg or "AcceleratorError" in msg:
                return 3  # the CUDA context is gone: the client starts a fresh worker
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            try:
                if not test_cpu:
                    torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
