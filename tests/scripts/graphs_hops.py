"""CUDA graph capture/replay, flex_attention (a higher-order op), trunc_normal_ and
`datasets`-style C extensions under the simulated GPU; prints what the test checks."""
import time

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

x = torch.randn(4096, 4096, device="cuda")
w = torch.empty(4096, 4096, device="cuda")
torch.nn.init.trunc_normal_(w, std=0.02)  # a rejection loop on `mask.any()`: must end
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    y = (x @ w).relu()  # warm-up, as frameworks do before capture
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g, pool=torch.cuda.graph_pool_handle()):
    print("capturing", torch.cuda.is_current_stream_capturing())
    y = (x @ w).relu()
print("capturing", torch.cuda.is_current_stream_capturing())
for _ in range(3):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g.replay()
    torch.cuda.synchronize()
    print(f"replay_ms {(time.perf_counter() - t0) * 1e3:.3f}")


def causal(b, h, q, kv):
    return q >= kv


q, k, v = (torch.randn(2, 8, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
mask = create_block_mask(causal, 2, 8, 1024, 1024, device="cuda")
out = flex_attention(q, k, v, block_mask=mask)
out.sum().backward()
print("flex", tuple(out.shape), tuple(q.grad.shape))

import datetime  # noqa: E402

import pandas  # noqa: E402,F401 - Cython extension importing datetime.datetime after the clock patch

print("datetime ok", datetime.datetime.now().year > 2000)

a = torch.empty(1000, device="cuda")
b = torch.empty(1000, device="cuda")
print("ptrs", a.data_ptr() != b.data_ptr(), a[10:].data_ptr() - a.data_ptr(), a.view(10, 100).data_ptr() == a.data_ptr())
# storages too (safetensors' and transformers' shared-tensor checks), without FakeTensor's warning
sa, sb = a[10:].untyped_storage(), b.untyped_storage()
print("storage ptrs", sa.data_ptr() == a.data_ptr(), sb.data_ptr() == b.data_ptr())
