"""Small CUDA tensors' values through what ordinary training scripts do (tests/test_runtime_values.py):
copy.deepcopy (EMA models, "keep the best weights"), NaN / Inf checks, the legacy
torch.cuda.FloatTensor constructors, CUDA RNG state save / restore, determinism errors.
Each line prints what a GPU run prints (the test compares)."""
import copy

import torch

torch.manual_seed(0)
t = torch.arange(4.0, device="cuda")
print("deepcopy tensor", copy.deepcopy(t).tolist(), torch.equal(t, copy.deepcopy(t)))
m = torch.nn.Linear(2, 1).cuda()
ema = copy.deepcopy(m)
best = copy.deepcopy(m.state_dict())
print("deepcopy module", ema.weight.tolist() == m.weight.tolist(), best["bias"].tolist() == m.bias.tolist(),
      ema.weight.device)

lstm = torch.nn.LSTM(2, 2)
before = lstm.weight_ih_l0.detach().clone()
lstm = lstm.cuda()  # cuDNN flattens the weights into one buffer
print("rnn weights", torch.equal(lstm.weight_ih_l0.detach().cpu(), before))

v = torch.tensor([1.0, float("nan"), float("inf")], device="cuda")
print("isnan", torch.isnan(v).tolist(), "isinf", torch.isinf(v).tolist(), "isfinite", torch.isfinite(v).tolist())
loss = torch.log(torch.tensor(-1.0, device="cuda"))
print("nan loss", bool(torch.isfinite(loss)), (loss != loss).item())
big = torch.randn(4096, 4096, device="cuda")  # no values: assumed finite, as before
print("big finite", bool(torch.isfinite(big).all()), bool(torch.isnan(big).any()))

ft = torch.cuda.FloatTensor(3, 4).fill_(2.0)
lt = torch.cuda.LongTensor([1, 2, 3])
print("legacy", tuple(ft.shape), ft.device.type, ft.sum().item(), lt.tolist(), lt.dtype,
      isinstance(ft, torch.cuda.FloatTensor), isinstance(lt, torch.cuda.FloatTensor),
      ft.type(torch.cuda.HalfTensor).dtype)

torch.manual_seed(0)
torch.rand(1, device="cuda")
state = torch.cuda.get_rng_state()
u1 = torch.rand(3, device="cuda").tolist()
torch.cuda.set_rng_state(state)
u2 = torch.rand(3, device="cuda").tolist()
torch.cuda.set_rng_state(state)
with torch.random.fork_rng(devices=[0]):
    torch.rand(5, device="cuda")
u3 = torch.rand(3, device="cuda").tolist()
print("rng replay", u1 == u2, u1 == u3)

from torch.utils.checkpoint import checkpoint

lin, drop = torch.nn.Linear(8, 8).cuda(), torch.nn.Dropout(0.5)
x = torch.randn(4, 8, device="cuda")
torch.manual_seed(1)
drop(lin(x)).sum().backward()
plain, lin.weight.grad = lin.weight.grad.clone(), None
torch.manual_seed(1)
checkpoint(lambda t: drop(lin(t)).sum(), x, use_reentrant=False).backward()
print("checkpoint dropout", torch.equal(plain, lin.weight.grad))

torch.use_deterministic_algorithms(True)
try:
    torch.histc(torch.randn(100, device="cuda"), bins=4)
    print("determinism no error")
except RuntimeError as e:
    print("determinism RuntimeError", type(e).__name__, "deterministic implementation" in str(e))
