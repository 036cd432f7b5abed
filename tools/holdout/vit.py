"""ViT-B/16-style encoder (conv patch embedding, nn.TransformerEncoderLayer, pre-norm), fp16
autocast with GradScaler, fused AdamW. Held-out: never used to fit the models."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from loop import base_parser, run_loop


class ViT(nn.Module):
    def __init__(self, image, patch, d, heads, layers, classes):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.pos
        x = self.enc(x)
        return self.head(self.norm(x[:, 0]))


def main():
    p = base_parser(__doc__)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--layers", type=int, default=12)
    args = p.parse_args()
    dev = torch.device(args.device)
    model = ViT(args.image, 16, args.dim, args.heads, args.layers, 1000).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(args.batch, 3, args.image, args.image, device=dev)
    y = torch.randint(0, 1000, (args.batch,), device=dev)

    def step(i):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    run_loop(args, step, {"workload": "vit", **vars(args)})


if __name__ == "__main__":
    main()
