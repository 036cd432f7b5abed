"""Advanced indexing of CUDA tensors with CPU index tensors, as DETR's loss does it (transformers'
loss_for_object_detection: `target_classes[idx] = target_classes_o` with the Hungarian matcher's
CPU indices; `t["class_labels"][J]`): a CUDA build moves the indices to the GPU inside the op.
Run with `--device cpu` it prints what a GPU run prints (tests/test_runtime_values.py)."""
import sys

import torch

dev = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
labels = torch.tensor([4, 5, 6], device=dev)
picked = labels[torch.tensor([2, 0])]
print("index", picked.tolist(), picked.device.type == torch.device(dev).type)
target = torch.full((2, 5), 9, dtype=torch.int64, device=dev)
target[(torch.tensor([0, 1]), torch.tensor([3, 4]))] = picked
print("index_put_", target.tolist())
mask = torch.tensor([[True, False, False, True, False], [False, False, True, False, False]])
target[mask] = 0
print("mask put", target.tolist())
acc = torch.zeros(4, device=dev).index_put((torch.tensor([1, 1, 3]),), torch.ones(3, device=dev), accumulate=True)
print("accumulate", acc.tolist())
print("read", target[torch.tensor([1])].tolist(), target[mask].tolist())
