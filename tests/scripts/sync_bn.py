"""SyncBatchNorm under DDP (convert_sync_batchnorm), channels-last, fp16 autocast: its CUDA-only
ops (batch_norm_stats, _gather_stats_with_counts, _elemt, _backward_reduce, _backward_elemt) and
the all-gather / all-reduce between them; then the model in eval mode (running statistics)."""
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3),
                      nn.BatchNorm2d(16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
model = nn.SyncBatchNorm.convert_sync_batchnorm(model).cuda().to(memory_format=torch.channels_last)
ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(2):
    x = torch.randn(8, 3, 32, 32, device="cuda").to(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = ddp(x).float().logsumexp(1).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
model.eval()
with torch.no_grad():
    out = model(torch.randn(2, 3, 32, 32, device="cuda"))
print("sync_bn", rank, type(model[1]).__name__, tuple(model[1].running_mean.shape), tuple(out.shape), flush=True)
dist.destroy_process_group()
