"""What a CUDA build of torch does where a CPU build's Meta kernels say otherwise, profiled one
step (test_op_tree reads the trace; the script prints the strides it saw):
- torch._grouped_mm of float32 experts (an HF mixture-of-experts model trained in fp32 under
  autocast): the Meta kernel accepts bf16 only, a CUDA build runs ATen's fallback, a loop of mm
  after reading the group ends on the host; bf16 experts take the one grouped-GEMM kernel;
- an element-wise op over a [N, C, 1, 1] map whose operands are all contiguous returns
  contiguous strides (TensorIterator's fast set-up), which later ops' memory format follows."""
import sys

import torch
from one_step_profile import profile_one_step

dev = "cuda"
tokens = torch.randn(64, 32, device=dev, requires_grad=True)
experts = torch.randn(4, 32, 48, device=dev, requires_grad=True)
offs = torch.tensor([16, 32, 40, 64], device=dev, dtype=torch.int32)  # groups of 16, 16, 8, 24 tokens
pooled = torch.empty_strided((8, 16, 1, 1), (16, 1, 16, 16), device=dev)  # a channels-last conv's output


def step():
    out = torch._grouped_mm(tokens, experts, offs=offs)  # float32: the fallback
    out.square().sum().backward()  # its backward: the fallback again (2-D x 2-D for the weights' gradient)
    torch._grouped_mm(tokens.detach().bfloat16(), experts.detach().bfloat16().transpose(-2, -1).contiguous()
                      .transpose(-2, -1), offs=offs)  # bf16: one grouped GEMM
    relu = torch.relu(pooled)
    up = torch.nn.functional.interpolate(relu, size=(4, 4), mode="bilinear")
    scaled = pooled * 2  # a wrapped number: no fast set-up, the stride order stays
    print("strides", relu.stride(), up.stride(), scaled.stride(), (pooled + pooled).stride())
    torch.cuda.synchronize()


profile_one_step(step, sys.argv[1])
