"""A mixture-of-experts dispatch as transformers' grouped-mm experts write it: tokens sorted by
their router's choice, gathered in that order and put back through the inverse permutation
(`inv = torch.empty_like(perm); inv[perm] = arange`). The router's scores come from data the
simulation does not have, so the permutation's values are unknown; reading its metadata
(`empty_like`) must not make them known zeros, which priced the gather's backward as one row
taking every index. Prints the backward's time (CUDA events) and whether `perm` holds values."""
import torch

torch.manual_seed(0)
tokens, top_k, hidden, experts = 4096, 2, 1024, 16
h = torch.randn(tokens, hidden, device="cuda", requires_grad=True)
router = torch.nn.Linear(hidden, experts).cuda()
choice = router(h).argmax(-1).repeat_interleave(top_k)  # one expert per token, twice
_, perm = torch.sort(choice)
inv = torch.empty_like(perm)
inv[perm] = torch.arange(perm.numel(), device="cuda")
out = h[perm // top_k][inv]
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
out.sum().backward()
end.record()
torch.cuda.synchronize()
print(f"backward_ms {start.elapsed_time(end):.3f}")
