"""runtime/dispatch/fake_wrap.py: FakeTensor's hot paths without their general Python must make
exactly what torch's own code makes (issue #18)."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, in_kernel_invocation_manager

from phantora_prof.runtime.dispatch import fake_wrap


@pytest.fixture()
def mode():
    return FakeTensorMode(allow_non_fake_inputs=True)


def test_fast_wrapping_is_on_for_the_installed_torch(mode):
    # CI pins the torch this was written against: the fast path must be taken there, else the
    # speed-up silently disappears.
    assert fake_wrap.FakeWrapper(mode).fast


@pytest.mark.parametrize("shape, dtype, requires_grad", [
    ((4, 8), torch.float32, False), ((2, 3, 5), torch.bfloat16, True), ((), torch.int64, False),
    ((0, 7), torch.float16, True),
])
@pytest.mark.parametrize("device", [torch.device("cuda", 0), torch.device("cuda", 3)])
def test_wrapped_tensor_equals_fake_tensors_own(mode, shape, dtype, requires_grad, device):
    wrapper = fake_wrap.FakeWrapper(mode)

    def meta():
        return torch.empty(shape, dtype=dtype, device="meta").requires_grad_(requires_grad) \
            if dtype.is_floating_point else torch.empty(shape, dtype=dtype, device="meta")

    ref = FakeTensor(mode, meta(), device)
    mine = wrapper.wrap(meta(), device)
    assert type(mine) is FakeTensor
    assert mine.__dict__ == ref.__dict__
    assert torch._C._dispatch_keys(mine) == torch._C._dispatch_keys(ref)
    assert (mine.shape, mine.stride(), mine.dtype, mine.device, mine.requires_grad) == \
           (ref.shape, ref.stride(), ref.dtype, ref.device, ref.requires_grad)
    assert _data_ptr_outcome(mine) == _data_ptr_outcome(ref)  # the mutable-data-pointer guard


def _data_ptr_outcome(t: torch.Tensor) -> str:
    try:
        return f"value {t.data_ptr()}"
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return f"raises {type(exc).__name__}"


def test_kernel_invocation_sets_and_restores_what_torchs_manager_does(mode):
    assert fake_wrap.kernel_invocation_factory() is fake_wrap.KernelInvocation

    def inside(manager):
        with manager(mode):
            state = (mode.in_kernel_invocation, torch._C._meta_in_tls_dispatch_include(),
                     torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set())
        return state, (mode.in_kernel_invocation, torch._C._meta_in_tls_dispatch_include())

    assert inside(fake_wrap.KernelInvocation) == inside(in_kernel_invocation_manager)
    assert inside(fake_wrap.KernelInvocation)[1] == (False, False)


def test_device_of_reads_what_device_says_and_declines_otherwise(mode):
    wrapper = fake_wrap.FakeWrapper(mode)
    t = wrapper.wrap(torch.empty(3, device="meta"), torch.device("cuda", 2))
    assert wrapper.device_of(t) == t.device == torch.device("cuda", 2)
    with fake_wrap.KernelInvocation(mode):
        assert wrapper.device_of(t) is None  # t.device is "meta" in there
    other = FakeTensor(FakeTensorMode(), torch.empty(3, device="meta"), torch.device("cuda", 0))
    assert wrapper.device_of(other) is None
    assert wrapper.device_of(torch.empty(3)) is None
