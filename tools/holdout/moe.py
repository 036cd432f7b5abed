"""Mixture-of-experts held-out workload: HF transformers' Mixtral (top-2 of 8 experts per
token, SwiGLU experts, GQA attention) built from a config, bf16, AdamW, with the router's
auxiliary loss. Its routing is data-dependent (top-k, one_hot, where, index_add_): under the
simulator the router's choices are assumed balanced (runtime/dispatch/values.py), on the GPU
they are whatever the random router picks.

    python tools/holdout/moe.py [--experts 8] [--top-k 2] [--tokens 4096] [--steps 10]
"""
import torch

from loop import base_parser, run_loop
from zoo import import_torchvision


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    args = p.parse_args()
    import_torchvision()  # transformers imports it when it is installed
    from transformers.models.mixtral import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    cfg = MixtralConfig(hidden_size=args.dim, intermediate_size=2 * args.dim, num_hidden_layers=args.layers,
                        num_attention_heads=args.dim // 64, num_key_value_heads=args.dim // 256,
                        num_local_experts=args.experts, num_experts_per_tok=args.top_k, vocab_size=32000,
                        max_position_embeddings=args.seq, output_router_logits=True)
    model = MixtralForCausalLM(cfg).to(args.device, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=args.device)

    def step(_):
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run_loop(args, step, {"workload": "moe", "params": sum(t.numel() for t in model.parameters()),
                          "experts": args.experts, "top_k": args.top_k, "batch": args.batch, "seq": args.seq,
                          "dim": args.dim, "layers": args.layers})


if __name__ == "__main__":
    main()
