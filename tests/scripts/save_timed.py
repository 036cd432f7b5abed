"""torch.save / torch.load of a CPU state dict, to a path and to a file object, timed with the
script's own clock (simulated under phantora-prof): tests/test_e2e.py."""
import io
import os
import sys
import time

import torch

out = sys.argv[1]
sd = {f"w{i}": torch.zeros(1 << 20) for i in range(4)}  # 4 x 4 MiB of fp32
sd["big"] = torch.zeros(8 << 20)  # 32 MiB: read back into fresh pages
path = os.path.join(out, "sd.pt")
t0 = time.perf_counter()
torch.save(sd, path)
t1 = time.perf_counter()
buf = io.BytesIO()
torch.save(sd, buf)
t2 = time.perf_counter()
buf.seek(0)
torch.load(buf)
t3 = time.perf_counter()
torch.load(path, mmap=True)  # storages read lazily: not charged the whole file
t4 = time.perf_counter()
print(f"BYTES {os.path.getsize(path)} {len(buf.getvalue())}")
print(f"TIMES_NS {int((t1 - t0) * 1e9)} {int((t2 - t1) * 1e9)} {int((t3 - t2) * 1e9)} {int((t4 - t3) * 1e9)}")
