// The CUDA entry of scaled_dot_product_attention's backend choice, for CPU-only builds.
//
// `aten::scaled_dot_product_attention` (CompositeImplicitAutograd) does not call the
// `aten::_fused_sdp_choice` op: it asks the DispatchStub `_fused_sdp_choice_stub` for the
// query's device type directly, and takes the math path when the stub has no kernel for
// that device. A CUDA build registers `_fused_sdp_choice_cuda` (select_sdp_backend) there; a
// CPU build registers nothing, so on fake CUDA tensors every SDPA call silently became
// bmm + softmax + bmm. The native multi-head-attention fast path asks the same stub.
//
// The kernel installed here forwards the question to the `aten::_fused_sdp_choice` op
// through the dispatcher, where the simulator answers it (phantora_prof/runtime/dispatch/sdpa.py:
// torch's CUDA selection rules evaluated for the simulated GPU): the capture mode on the
// Python key, a CUDA-key kernel when the Python key is excluded, a Meta kernel under a
// FakeTensorMode. The rest of the composite (mask conversion, padding, the call of the
// chosen fused op, autocast, autograd) stays torch's own C++.
//
// Installed on request (phantora_route_sdp_choice, from runtime/dispatch/sdpa.py's install()), not at
// load time: without the simulator's kernels the op would have no answer for CUDA tensors.

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <ATen/native/transformers/attention.h>
#include <c10/util/Exception.h>

#include <optional>

namespace phantora {
namespace {

thread_local bool g_in_choice = false;

int64_t fused_sdp_choice_cuda(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                              const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                              std::optional<double> scale, bool enable_gqa) {
  // The op's stock Meta kernel asks this stub again; the simulator replaces that kernel, so
  // coming back here means its kernels are missing: say so instead of recursing.
  TORCH_CHECK(!g_in_choice,
              "phantora-prof: the SDPA backend choice re-entered itself; the simulator's kernels for "
              "aten::_fused_sdp_choice (phantora_prof/runtime/dispatch/sdpa.py) are not installed in this process");
  g_in_choice = true;
  struct Reset {
    ~Reset() { g_in_choice = false; }
  } reset;
  // The CUDA build calls the stub, not the op: no dispatcher call of it is recorded there.
  at::DisableRecordFunctionGuard no_record;
  return at::_fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace
}  // namespace phantora

extern "C" {
// Route the stub's CUDA entry to the op (idempotent). Called only on CPU builds, whose stub has
// no CUDA kernel; a CUDA build keeps its own select_sdp_backend (and does not load this library).
__attribute__((visibility("default"))) int phantora_route_sdp_choice() {
  at::native::_fused_sdp_choice_stub.set_cuda_dispatch_ptr(&phantora::fused_sdp_choice_cuda);
  return 1;
}
}
