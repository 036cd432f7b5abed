// cuDNN entry points of the recurrent layers, for CPU-only builds of PyTorch.
//
// nn.LSTM / nn.GRU / nn.RNN call at::lstm / at::gru / at::rnn_*, CompositeImplicit ops whose
// C++ asks `cudnn_is_acceptable(input)` and, on a CUDA build with cuDNN, hands the whole
// recurrence to a DispatchStub (`lstm_cudnn_stub`, ...) whose CUDA implementation calls
// `aten::_cudnn_rnn` once per layer stack: one op, cuDNN's kernels. The simulated device says
// it has cuDNN (fake_cuda.cpp's hooks, as a CUDA build would), so the same stubs are reached
// here; a CPU build has no CUDA implementation for them, so these provide one that makes the
// same `_cudnn_rnn` call. The capture mode then records and fakes `_cudnn_rnn`, and autograd's
// formula for it runs `_cudnn_rnn_backward`, as on the GPU.
//
// What is not reproduced: cuDNN's dropout state between layers (`dropout_state` is passed
// undefined; its few-MiB buffer is not allocated), and packed sequences' batch sizes are
// read from the (real, CPU) batch_sizes tensor as CUDA torch does.

#include <ATen/ATen.h>
#include <ATen/native/RNN.h>

namespace phantora {
namespace {

using at::Tensor;
using at::TensorList;

// cudnnRNNMode_t values (cudnn.h), as _cudnn_rnn takes them
constexpr int64_t kRnnRelu = 0;
constexpr int64_t kRnnTanh = 1;
constexpr int64_t kLstm = 2;
constexpr int64_t kGru = 3;

// The flat buffer the parameters are views of when nn.RNN flattened them for cuDNN
// (flatten_parameters); undefined when they are separate tensors, and _cudnn_rnn then
// copies them into a new buffer itself, as it does on the GPU.
Tensor flat_weight_buffer(TensorList params) {
  if (params.empty()) {
    return Tensor();
  }
  const auto& first = params[0];
  int64_t total = 0;
  for (const auto& p : params) {
    if (!p.defined() || !p.is_contiguous() || !p.storage().is_alias_of(first.storage())) {
      return Tensor();
    }
    total += p.numel();
  }
  if (first.storage_offset() != 0 ||
      static_cast<int64_t>(first.storage().nbytes()) != total * first.element_size()) {
    return Tensor();
  }
  return first.detach().as_strided({total}, {1}, 0);  // a plain tensor on the storage, as cuDNN gets it
}

std::vector<c10::SymInt> batch_sizes_of(const Tensor& batch_sizes) {
  std::vector<c10::SymInt> out;
  if (!batch_sizes.defined()) {
    return out;
  }
  auto cpu = batch_sizes.to(at::kCPU, at::kLong).contiguous();
  const int64_t* data = cpu.data_ptr<int64_t>();
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    out.emplace_back(data[i]);
  }
  return out;
}

// The shared body: one _cudnn_rnn call over the whole stack, as cuDNN's implementation does.
std::tuple<Tensor, Tensor, Tensor> cudnn_call(const Tensor& input, const Tensor& batch_sizes, const Tensor& hx,
                                              const Tensor& cx, TensorList params, bool has_biases, int64_t mode,
                                              int64_t num_layers, double dropout_p, bool train,
                                              bool bidirectional, bool batch_first) {
  c10::SymInt hidden_size = hx.sym_size(2);
  c10::SymInt proj_size = 0;
  if (cx.defined() && cx.sym_size(2) != hx.sym_size(2)) {  // LSTM with projections
    hidden_size = cx.sym_size(2);
    proj_size = hx.sym_size(2);
  }
  int64_t weight_stride0 = has_biases ? 4 : 2;
  if (proj_size != 0) {
    ++weight_stride0;
  }
  auto sizes = batch_sizes_of(batch_sizes);
  auto out = at::_cudnn_rnn_symint(input, params, weight_stride0, flat_weight_buffer(params), hx, cx, mode,
                                   hidden_size, proj_size, num_layers, batch_first, dropout_p, train,
                                   bidirectional, sizes, /*dropout_state=*/std::nullopt);
  return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

void lstm_cudnn(Tensor& output, Tensor& hy, Tensor& cy, const Tensor& input, TensorList hx, TensorList params,
                bool has_biases, int64_t num_layers, double dropout_p, bool train, bool bidirectional,
                bool batch_first) {
  std::tie(output, hy, cy) = cudnn_call(input, Tensor(), hx[0], hx[1], params, has_biases, kLstm, num_layers,
                                        dropout_p, train, bidirectional, batch_first);
}

void lstm_packed_cudnn(Tensor& output, Tensor& hy, Tensor& cy, const Tensor& data, const Tensor& batch_sizes,
                       TensorList hx, TensorList params, bool has_biases, int64_t num_layers, double dropout_p,
                       bool train, bool bidirectional) {
  std::tie(output, hy, cy) = cudnn_call(data, batch_sizes, hx[0], hx[1], params, has_biases, kLstm, num_layers,
                                        dropout_p, train, bidirectional, /*batch_first=*/false);
}

template <int64_t Mode>
void one_hidden(Tensor& output, Tensor& hy, const Tensor& input, const Tensor& hx, TensorList params,
                bool has_biases, int64_t num_layers, double dropout_p, bool train, bool bidirectional,
                bool batch_first) {
  Tensor unused;
  std::tie(output, hy, unused) = cudnn_call(input, Tensor(), hx, Tensor(), params, has_biases, Mode, num_layers,
                                            dropout_p, train, bidirectional, batch_first);
}

template <int64_t Mode>
void one_hidden_packed(Tensor& output, Tensor& hy, const Tensor& data, const Tensor& batch_sizes, const Tensor& hx,
                       TensorList params, bool has_biases, int64_t num_layers, double dropout_p, bool train,
                       bool bidirectional) {
  Tensor unused;
  std::tie(output, hy, unused) = cudnn_call(data, batch_sizes, hx, Tensor(), params, has_biases, Mode,
                                            num_layers, dropout_p, train, bidirectional, /*batch_first=*/false);
}

// Installed at load time, like REGISTER_CUDA_DISPATCH in a CUDA build.
struct RegisterRnnStubs {
  RegisterRnnStubs() {
    using namespace at::native;
    lstm_cudnn_stub.set_cuda_dispatch_ptr(&lstm_cudnn);
    lstm_packed_cudnn_stub.set_cuda_dispatch_ptr(&lstm_packed_cudnn);
    gru_cudnn_stub.set_cuda_dispatch_ptr(&one_hidden<kGru>);
    gru_packed_cudnn_stub.set_cuda_dispatch_ptr(&one_hidden_packed<kGru>);
    rnn_tanh_cudnn_stub.set_cuda_dispatch_ptr(&one_hidden<kRnnTanh>);
    rnn_tanh_packed_cudnn_stub.set_cuda_dispatch_ptr(&one_hidden_packed<kRnnTanh>);
    rnn_relu_cudnn_stub.set_cuda_dispatch_ptr(&one_hidden<kRnnRelu>);
    rnn_relu_packed_cudnn_stub.set_cuda_dispatch_ptr(&one_hidden_packed<kRnnRelu>);
  }
};
const RegisterRnnStubs register_rnn_stubs;

}  // namespace
}  // namespace phantora
