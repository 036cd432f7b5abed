"""Wide fp32 MLP (TF32 off unless --tf32), Adam with the for-loop implementation
(foreach=False: launch-bound optimizer). Held-out: never used to fit the models."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from loop import base_parser, run_loop


def main():
    p = base_parser(__doc__)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--tf32", action="store_true")
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    mods = []
    for _ in range(args.layers):
        mods += [nn.Linear(args.width, args.width), nn.LayerNorm(args.width), nn.GELU()]
    model = nn.Sequential(*mods, nn.Linear(args.width, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(args.batch, args.width, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)

    def step(i):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run_loop(args, step, {"workload": "mlp", **vars(args)})


if __name__ == "__main__":
    main()
