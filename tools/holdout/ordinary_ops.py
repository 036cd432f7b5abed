"""Ordinary ops scripts use, each tried alone, printing its result or its error: run on a GPU
(`python ordinary_ops.py cuda`), under phantora-prof (the same) and on the CPU (`... cpu`), the
outputs side by side say where the simulation does what a GPU does not (session 49: CTC with CPU
lengths, sparse COO on CUDA, indexing with CPU indices)."""
import sys, torch, torch.nn as nn, torch.nn.functional as F
dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
def t(name, fn):
    try:
        r = fn()
        print(name, "ok", r)
    except Exception as e:
        print(name, "FAIL", type(e).__name__, str(e).splitlines()[0][:200])
torch.manual_seed(0)
x = torch.randn(4, 16, 8, 32, device=dev)
def rope():
    f = torch.polar(torch.ones(16, 16, device=dev), torch.randn(16, 16, device=dev))
    xc = torch.view_as_complex(x.float().reshape(4, 16, 8, 16, 2))
    out = torch.view_as_real(xc * f[None, :, None, :]).flatten(3)
    return tuple(out.shape)
t("rope_complex", rope)
def gp():
    d = nn.Linear(32, 1).to(dev); inp = torch.randn(8, 32, device=dev, requires_grad=True)
    out = d(inp); g, = torch.autograd.grad(out.sum(), inp, create_graph=True)
    pen = ((g.norm(2, dim=1) - 1) ** 2).mean(); pen.backward(); return round(float(d.weight.grad.abs().sum() >= 0), 1)
t("grad_penalty", gp)
def fvmap():
    from torch.func import vmap, grad
    w = torch.randn(32, device=dev)
    f = lambda xx: (xx * w).sum() ** 2
    return tuple(vmap(grad(f))(torch.randn(5, 32, device=dev)).shape)
t("func_vmap_grad", fvmap)
t("cdist", lambda: tuple(torch.cdist(torch.randn(10, 3, device=dev), torch.randn(7, 3, device=dev)).shape))
t("unique_counts", lambda: [v.tolist() for v in torch.unique(torch.tensor([1, 3, 1, 2, 3, 3], device=dev), return_counts=True)])
t("randperm", lambda: sorted(torch.randperm(10, device=dev).tolist()))
t("multinomial", lambda: tuple(torch.multinomial(torch.ones(4, 10, device=dev), 3).shape))
t("mem_get_info", lambda: [v > 0 for v in torch.cuda.mem_get_info()] if dev == "cuda" else "cpu")
t("interp_antialias", lambda: tuple(F.interpolate(torch.randn(2, 3, 64, 64, device=dev), size=(32, 32), mode="bilinear", antialias=True).shape))
t("stft", lambda: tuple(torch.stft(torch.randn(2, 4000, device=dev), 400, hop_length=160, window=torch.hann_window(400, device=dev), return_complex=True).abs().shape))
t("scatter_reduce", lambda: torch.zeros(3, device=dev).scatter_reduce(0, torch.tensor([0, 1, 0, 2], device=dev), torch.tensor([1., 2., 3., 4.], device=dev), "amax").tolist())
t("sort", lambda: torch.sort(torch.tensor([3., 1., 2.], device=dev)).indices.tolist())
t("topk_cpu", lambda: torch.topk(torch.tensor([3., 1., 2., 5.], device=dev), 2).indices.cpu().numpy().tolist())
def tr():
    m = nn.Transformer(d_model=64, nhead=4, num_encoder_layers=2, num_decoder_layers=2, batch_first=True).to(dev)
    o = m(torch.randn(2, 10, 64, device=dev), torch.randn(2, 7, 64, device=dev)); o.sum().backward(); return tuple(o.shape)
t("nn_transformer", tr)
def dist():
    d = torch.distributions.Normal(torch.zeros(5, device=dev), torch.ones(5, device=dev))
    s = d.rsample(); return tuple(d.log_prob(s).shape)
t("distributions", dist)
def sparse():
    i = torch.tensor([[0, 1], [1, 0]], device=dev); v = torch.tensor([1., 2.], device=dev)
    s = torch.sparse_coo_tensor(i, v, (2, 2)); return (s @ torch.ones(2, 1, device=dev)).flatten().tolist()
t("sparse_mm", sparse)
def idx_cpu():
    tgt = torch.full((2, 5), 9, device=dev)
    tgt[(torch.tensor([0, 1]), torch.tensor([3, 4]))] = torch.tensor([1, 2], device=dev)
    tgt[torch.tensor([[True, False, False, False, False]] * 2)] = 0
    return tgt.tolist(), torch.arange(4, device=dev)[torch.tensor([3, 1])].tolist()
t("index_cpu_indices", idx_cpu)
def ctc():
    lp = torch.randn(50, 4, 20, device=dev).log_softmax(2)
    return round(F.ctc_loss(lp, torch.randint(1, 20, (4, 10), device=dev), torch.full((4,), 50), torch.full((4,), 10)).item() * 0, 1)
t("ctc", ctc)
def amp_fp16():
    m = nn.Linear(32, 32).to(dev); opt = torch.optim.SGD(m.parameters(), 0.1); sc = torch.amp.GradScaler(dev)
    with torch.autocast(dev, dtype=torch.float16):
        l = m(torch.randn(4, 32, device=dev)).float().sum()
    sc.scale(l).backward(); sc.unscale_(opt); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); sc.step(opt); sc.update(); return sc.get_scale()
t("gradscaler", amp_fp16)
def bucketize():
    return torch.bucketize(torch.tensor([0.1, 0.5, 0.9], device=dev), torch.tensor([0.3, 0.6], device=dev)).tolist()
t("bucketize", bucketize)
def embbag():
    e = nn.EmbeddingBag(100, 8, mode="mean").to(dev)
    return tuple(e(torch.tensor([1, 2, 4, 5, 4, 3], device=dev), torch.tensor([0, 3], device=dev)).shape)
t("embedding_bag", embbag)
def fold():
    return tuple(F.fold(F.unfold(torch.randn(1, 3, 8, 8, device=dev), 2, stride=2), (8, 8), 2, stride=2).shape)
t("fold_unfold", fold)
def gridsample():
    g = F.affine_grid(torch.eye(2, 3, device=dev)[None].repeat(2, 1, 1), (2, 3, 16, 16), align_corners=False)
    return tuple(F.grid_sample(torch.randn(2, 3, 16, 16, device=dev), g, align_corners=False).shape)
t("grid_sample", gridsample)
def where_nonzero():
    a = torch.tensor([0., 1., 0., 2.], device=dev); return torch.where(a > 0)[0].tolist()
t("where_nonzero", where_nonzero)
def linalg():
    a = torch.randn(4, 4, device=dev); a = a @ a.T + 4 * torch.eye(4, device=dev)
    return tuple(torch.linalg.cholesky(a).shape), tuple(torch.linalg.svd(a).S.shape), tuple(torch.linalg.inv(a).shape)
t("linalg", linalg)
t("nan_to_num_item", lambda: torch.nan_to_num(torch.tensor([float('nan'), 1.0], device=dev)).sum().item())
t("cumsum_argmax", lambda: torch.cumsum(torch.tensor([1, 2, 3], device=dev), 0).argmax().item())
