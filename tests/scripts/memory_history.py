"""torch.cuda.memory._record_memory_history / _dump_snapshot on the simulated GPU:
`python memory_history.py SNAPSHOT.pickle`."""
import sys

import torch

torch.cuda.memory._record_memory_history(max_entries=100_000)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)).cuda()
x = torch.randn(64, 512, device="cuda")
model(x).sum().backward()  # LINE_OF_STEP
try:
    torch.empty(1 << 50, dtype=torch.uint8, device="cuda")  # 1 PiB: out of memory
except torch.cuda.OutOfMemoryError:
    print("oom caught")
print("allocated", torch.cuda.memory_allocated())
torch.cuda.memory._dump_snapshot(sys.argv[1])
torch.cuda.memory._record_memory_history(enabled=None)
before = len(torch.cuda.memory._snapshot()["device_traces"][0])
torch.empty(1024, device="cuda")
print("stopped", len(torch.cuda.memory._snapshot()["device_traces"][0]) == before)
