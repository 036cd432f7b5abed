"""Which ops does scaled_dot_product_attention run for an additive mask that is not contiguous
(T5's relative position bias: an embedding output permuted to (1, heads, q, k), strides
(.., 1, k*heads, heads))? Profiles one forward and backward per case and prints the
main thread's ops in order, with the backend kernels they launched.

    python tools/holdout/sdpa_mask_probe.py
"""
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


def case(name, mask_fn, dropout=0.1):
    q, k, v = (torch.randn(16, 8, 512, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    emb = torch.randn(512, 512, 8, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for _ in range(2):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask_fn(emb), dropout_p=dropout).sum().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask_fn(emb), dropout_p=dropout).sum().backward()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type.name == "CPU"]
    kernels = sorted({e.name[:70] for e in prof.events() if e.device_type.name == "CUDA"})
    print(f"== {name}: mask strides {tuple(mask_fn(emb).stride())}")
    print("ops:", [n for n in names if n.startswith("aten::")][:24])
    print("kernels:", kernels)


print("torch", torch.__version__, "sdpa is", type(F.scaled_dot_product_attention))
case("permuted mask, requires grad", lambda e: e.permute(2, 0, 1).unsqueeze(0))
case("permuted mask, no grad", lambda e: e.detach().permute(2, 0, 1).unsqueeze(0))
case("contiguous mask, requires grad", lambda e: e.permute(2, 0, 1).unsqueeze(0).contiguous())
case("permuted mask, no dropout", lambda e: e.permute(2, 0, 1).unsqueeze(0), dropout=0.0)
