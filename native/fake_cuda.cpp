// phantora fake-CUDA device for CPU-only builds of PyTorch.
//
// A CPU build of torch has no CUDA device guard and no CUDA hooks. FakeTensorMode can
// still create tensors whose device is "cuda", but the first thing that asks the runtime
// about that device (autograd's InputMetadata asks for the current stream, the autograd
// engine counts devices, autocast/accelerator code asks the hooks whether CUDA exists)
// aborts the process with an uncatchable c10::Error. This library registers the three
// pieces that are missing, and nothing else:
//
//   1. FakeCudaGuardImpl  - c10::impl::DeviceGuardImplInterface for DeviceType::CUDA:
//                           N devices, per-thread current device and current streams,
//                           streams and events as plain ids, every sync a no-op.
//   2. FakeCudaHooks      - at::CUDAHooksInterface registered as "CUDAHooks" (the name
//                           at::detail::getCUDAHooks() looks up): CUDA is built and
//                           available, N devices, primary contexts exist.
//   3. FakeCudaTimer      - c10d::Timer for kCUDA: DDP's Reducer asks TimerRegistry for
//                           one, and DDP's logger asserts it exists from step 2 on.
//
// What torch 2.13 actually calls (traced, bf16 autocast + backward + fused AdamW + DDP):
// guard type/deviceCount/getDevice/setDevice/exchangeDevice/uncheckedSetDevice/
// getStream/exchangeStream/isStreamCapturing, hooks isBuilt/hasPrimaryContext, the timer
// constructor. The rest serves torch.Stream/torch.Event/torch.accelerator/pin_memory,
// and answers instead of the base classes' "not compiled with CUDA" errors.
//
// It must be dlopen'ed (RTLD_GLOBAL) after libc10.so/libtorch_cpu.so and BEFORE
// `import torch`: getCUDAHooks() caches its answer on first use, and the registrations
// happen in this library's static initializers.
//
// The device count comes from the environment variable PHANTORA_DEVICE_COUNT, read once
// when the library is loaded: default 8; a value that is not an integer in [1, 127]
// falls back to 8 with a warning. Never 0: torch treats 0 devices as "no CUDA".

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace phantora {
namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;
using c10::StreamId;

constexpr int kDefaultDeviceCount = 8;
constexpr int kMaxDeviceCount = 127;  // DeviceIndex is int8_t.

// Stream ids. The default stream of every device is id 0 (as on real CUDA, where the
// legacy default stream's handle is 0). Pool streams (getStreamFromGlobalPool) cycle
// through a fixed set per priority like CUDA's pool of 32; new streams (getNewStream)
// get fresh ids that are never reused. All are just numbers: nothing runs on them.
constexpr StreamId kPoolSize = 32;
constexpr StreamId kLowPriorityPoolBase = 1;                          // ids 1..32
constexpr StreamId kHighPriorityPoolBase = 1 + kPoolSize;             // ids 33..64
constexpr StreamId kFirstNewStreamId = 1 + 2 * kPoolSize;             // ids 65..

int read_device_count() {
  const char* env = std::getenv("PHANTORA_DEVICE_COUNT");
  if (env == nullptr || *env == '\0') {
    return kDefaultDeviceCount;
  }
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || n < 1 || n > kMaxDeviceCount) {
    std::fprintf(stderr,
                 "phantora_fake_cuda: PHANTORA_DEVICE_COUNT=%s is not an integer in "
                 "[1, %d]; using %d\n",
                 env, kMaxDeviceCount, kDefaultDeviceCount);
    return kDefaultDeviceCount;
  }
  return static_cast<int>(n);
}

// Read once, at load time (static initialization of this library).
const int g_device_count = read_device_count();

// Per-thread state, like the real CUDA runtime: the current device is per thread, and
// so is the current stream of each device (c10::cuda keeps a thread_local array).
thread_local DeviceIndex tls_current_device = 0;
thread_local std::array<StreamId, kMaxDeviceCount> tls_current_stream{};  // all 0

std::atomic<StreamId> g_next_new_stream{kFirstNewStreamId};
std::atomic<uint32_t> g_pool_counter_low{0};
std::atomic<uint32_t> g_pool_counter_high{0};
// Events are opaque non-null handles (never dereferenced): c10::Event only calls
// back into the guard when its handle is non-null once recorded.
std::atomic<uintptr_t> g_next_event{1};

bool valid_index(DeviceIndex i) {
  return i >= 0 && i < g_device_count;
}

void check_index(DeviceIndex i) {
  TORCH_CHECK(valid_index(i), "phantora fake CUDA: invalid device ordinal ",
              static_cast<int>(i), " (", g_device_count,
              " simulated devices; set PHANTORA_DEVICE_COUNT)");
}

// A device may come without an index ("cuda"): it means the current device.
DeviceIndex resolve(Device d) {
  return d.has_index() ? d.index() : tls_current_device;
}

Stream make_stream(DeviceIndex idx, StreamId id) {
  return Stream(Stream::UNSAFE, Device(DeviceType::CUDA, idx), id);
}

// ---------------------------------------------------------------------------------------
// 1. Device guard. Needed by DeviceGuard/OptionalDeviceGuard (every op on a cuda tensor
// that sets a guard), autograd (InputMetadata records the current stream of each input;
// the engine counts devices to start its per-device threads and syncs streams), and the
// generic torch.Stream / torch.Event / torch.accelerator APIs.
struct FakeCudaGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::CUDA; }

  Device exchangeDevice(Device d) const override {
    TORCH_CHECK(d.is_cuda(), "phantora fake CUDA guard got a non-CUDA device ", d);
    Device old(DeviceType::CUDA, tls_current_device);
    DeviceIndex idx = resolve(d);
    check_index(idx);
    tls_current_device = idx;
    return old;
  }

  Device getDevice() const override {
    return Device(DeviceType::CUDA, tls_current_device);
  }

  void setDevice(Device d) const override {
    TORCH_CHECK(d.is_cuda(), "phantora fake CUDA guard got a non-CUDA device ", d);
    DeviceIndex idx = resolve(d);
    check_index(idx);
    tls_current_device = idx;
  }

  // Called from destructors (guards restoring the previous device): must not throw.
  void uncheckedSetDevice(Device d) const noexcept override {
    DeviceIndex idx = resolve(d);
    if (valid_index(idx)) {
      tls_current_device = idx;
    }
  }

  Stream getStream(Device d) const override {
    DeviceIndex idx = resolve(d);
    check_index(idx);
    return make_stream(idx, tls_current_stream[idx]);
  }

  Stream getDefaultStream(Device d) const override {
    DeviceIndex idx = resolve(d);
    check_index(idx);
    return make_stream(idx, 0);
  }

  Stream getStreamFromGlobalPool(Device d, bool isHighPriority) const override {
    DeviceIndex idx = resolve(d);
    check_index(idx);
    auto& counter = isHighPriority ? g_pool_counter_high : g_pool_counter_low;
    StreamId base = isHighPriority ? kHighPriorityPoolBase : kLowPriorityPoolBase;
    return make_stream(idx, base + (counter.fetch_add(1) % kPoolSize));
  }

  Stream getNewStream(Device d, int /*priority*/) const override {
    DeviceIndex idx = resolve(d);
    check_index(idx);
    return make_stream(idx, g_next_new_stream.fetch_add(1));
  }

  Stream exchangeStream(Stream s) const override {
    DeviceIndex idx = s.device_index();
    check_index(idx);
    Stream old = make_stream(idx, tls_current_stream[idx]);
    tls_current_stream[idx] = s.id();
    return old;
  }

  // Mirrors real CUDA, where the default stream's cudaStream_t is 0. Nothing may
  // dereference it.
  void* getStreamNativeHandle(const Stream s) const override {
    return reinterpret_cast<void*>(static_cast<uintptr_t>(s.id()));
  }

  DeviceIndex deviceCount() const noexcept override {
    return static_cast<DeviceIndex>(g_device_count);
  }

  c10::DeviceCapability getDeviceCapability(Device /*d*/) const override {
    return c10::DeviceCapability();  // every dtype supported (the default)
  }

  // Events: opaque ids; recording, waiting and querying all succeed at once.
  void record(void** event, const Stream& /*stream*/, const DeviceIndex /*device_index*/,
              const c10::EventFlag /*flag*/) const override {
    if (*event == nullptr) {
      *event = reinterpret_cast<void*>(g_next_event.fetch_add(1));
    }
  }
  void block(void* /*event*/, const Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void destroyEvent(void* /*event*/, const DeviceIndex /*device_index*/)
      const noexcept override {}
  double elapsedTime(void* /*e1*/, void* /*e2*/, const DeviceIndex /*device_index*/)
      const override {
    return 0.0;  // simulated timing is answered on the Python side
  }

  bool queryStream(const Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const DeviceIndex /*device_index*/) const override {}
  bool isStreamCapturing(const Stream& /*stream*/) const override { return false; }
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/,
                             const Stream& /*stream*/) const override {}
};

C10_REGISTER_GUARD_IMPL(CUDA, FakeCudaGuardImpl)

const c10::impl::DeviceGuardImplInterface& guard() {
  static const FakeCudaGuardImpl impl;
  return impl;
}

// ---------------------------------------------------------------------------------------
// "Pinned" host memory. Tensor.pin_memory() and torch.empty(..., pin_memory=True) ask the
// hooks for this allocator (a CPU build otherwise raises "Pinned memory requires CUDA").
// It hands out ordinary host memory but remembers the blocks, so Tensor.is_pinned()
// answers true for exactly these tensors: the runtime can tell pinned from pageable
// host-to-device copies (they cost differently on a real GPU).
class FakePinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    if (p != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      blocks_[reinterpret_cast<uintptr_t>(p)] = nbytes;
    }
    return {p, p, &FakePinnedAllocator::deleter, c10::Device(DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &FakePinnedAllocator::deleter; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // True if `ptr` points into a block of ours (interior pointers count, like CUDA's
  // cudaPointerGetAttributes).
  bool contains(const void* ptr) {
    auto addr = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.upper_bound(addr);
    if (it == blocks_.begin()) {
      return false;
    }
    --it;
    return addr < it->first + it->second;
  }

  static FakePinnedAllocator& get() {
    static auto* instance = new FakePinnedAllocator();  // leaked: outlives tensors
    return *instance;
  }

 private:
  static void deleter(void* p) {
    if (p == nullptr) {
      return;
    }
    {
      std::lock_guard<std::mutex> lock(get().mu_);
      get().blocks_.erase(reinterpret_cast<uintptr_t>(p));
    }
    c10::free_cpu(p);
  }

  std::mutex mu_;
  std::map<uintptr_t, size_t> blocks_;  // base address -> size
};

// ---------------------------------------------------------------------------------------
// 2. CUDA hooks. at::hasCUDA(), at::getAccelerator() (autograd's engine and the
// torch.accelerator API use it to find the stream/device of backward ops),
// Context::lazyInitDevice(kCUDA), pin_memory and is_pinned all go through these.
constexpr long kCuDNNVersion = 91900;

struct FakeCudaHooks final : public at::CUDAHooksInterface {
  explicit FakeCudaHooks(at::CUDAHooksArgs /*args*/) {}

  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasCUDART() const override { return true; }
  void init() const override {}  // lazy init: nothing to initialize
  bool hasPrimaryContext(DeviceIndex /*device_index*/) const override { return true; }

  DeviceIndex deviceCount() const override {
    return static_cast<DeviceIndex>(g_device_count);
  }
  int getNumGPUs() const override { return g_device_count; }
  DeviceIndex current_device() const override { return tls_current_device; }
  DeviceIndex getCurrentDevice() const override { return tls_current_device; }
  void setCurrentDevice(DeviceIndex device) const override {
    guard().setDevice(Device(DeviceType::CUDA, device));
  }
  DeviceIndex exchangeDevice(DeviceIndex device) const override {
    return guard().exchangeDevice(Device(DeviceType::CUDA, device)).index();
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  void deviceSynchronize(DeviceIndex /*device_index*/) const override {}

  // Pinned host memory: see FakePinnedAllocator (real host memory, so pinned buffers
  // stay real CPU tensors; only cuda tensors are fake).
  bool isPinnedPtr(const void* data) const override {
    return FakePinnedAllocator::get().contains(data);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return &FakePinnedAllocator::get();
  }
  // Fake cuda tensors have no memory to look up: answer the current device.
  Device getDeviceFromPtr(void* /*data*/) const override {
    return Device(DeviceType::CUDA, tls_current_device);
  }

  long versionCUDART() const override { return 12080; }  // reported as CUDA 12.8

  // cuDNN, cuBLASLt, cuSOLVER and MAGMA as a CUDA wheel of torch has them. C++ composites
  // choose their backend from these answers (batch norm, RNNs, convolution, ...): a CUDA
  // build takes the cuDNN paths, so the simulated device must say it has cuDNN too.
  // cuDNN 9.19 is what the reference H200 machine reported (torch.backends.cudnn.version()).
  bool hasMAGMA() const override { return true; }
  bool hasCuDNN() const override { return true; }
  bool hasCuSOLVER() const override { return true; }
  bool hasCuBLASLt() const override { return true; }
  bool compiledWithCuDNN() const override { return true; }
  bool supportsDilatedConvolutionWithCuDNN() const override { return true; }
  bool supportsDepthwiseConvolutionWithCuDNN() const override { return true; }
  bool supportsBFloat16ConvolutionWithCuDNNv8() const override { return true; }
  bool supportsBFloat16RNNWithCuDNN() const override { return true; }
  long versionCuDNN() const override { return kCuDNNVersion; }
  long versionRuntimeCuDNN() const override { return kCuDNNVersion; }
  double batchnormMinEpsilonCuDNN() const override { return 1e-5; }  // CUDNN_BN_MIN_EPSILON
  std::string showConfig() const override {
    return "  - phantora fake CUDA (simulated devices, no CUDA runtime)\n";
  }
};

// Key "CUDAHooks": the name at::detail::getCUDAHooks() asks the registry for (the
// REGISTER_CUDA_HOOKS macro would use the class name as the key).
using at::CUDAHooksRegistry;
using at::RegistererCUDAHooksRegistry;
C10_REGISTER_TYPED_CLASS(CUDAHooksRegistry, "CUDAHooks", FakeCudaHooks)

// ---------------------------------------------------------------------------------------
// 3. c10d timer. DDP's Reducer asks `TimerRegistry()->Create(kCUDA, device)` for a
// timer (nullptr when none is registered), and from the second forward on DDP's
// Logger::set_runtime_stats_and_log INTERNAL_ASSERTs that it exists. The real CudaTimer
// records CUDA events; ours has none, so GPU-side differences are "not recorded"
// (nullopt), which the logger skips. Host timestamps (Timer::record) still work.
class FakeCudaTimer final : public c10d::Timer {
 public:
  explicit FakeCudaTimer(c10::Device /*device*/) {}
  std::optional<int64_t> measureDifference(Event /*start*/, Event /*end*/) override {
    return std::nullopt;
  }
};

using c10d::RegistererTimerRegistry;
using c10d::TimerRegistry;
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kCUDA, FakeCudaTimer)

}  // namespace
}  // namespace phantora

// Plain-C entry point, so the loader can check how many devices the loaded library
// reports without importing torch.
extern "C" {
__attribute__((visibility("default"))) int phantora_fake_cuda_device_count() {
  return phantora::g_device_count;
}

// A FakeTensor's TensorImpl after `t.data = <real tensor>` (runtime/patches/modules.py): torch's
// set_data gave it the real tensor's data and device but kept the subclass's Python dispatch key
// and its Python-answered device, which a tensor that is no longer a FakeTensor has no one to
// answer. `impl` is the tensor's `_cdata` (its TensorImpl*).
__attribute__((visibility("default"))) void phantora_plain_tensor_impl(void* impl) {
  auto* t = static_cast<c10::TensorImpl*>(impl);
  t->set_python_custom_device(false);
  t->set_python_custom_layout(false);
  t->set_python_custom_sizes_strides(c10::TensorImpl::SizesStridesPolicy::Default);
  t->set_python_dispatch(false);
}

// The other way (`t.data = <simulated CUDA tensor>` on a tensor the identity swap cannot take):
// after set_data copied a FakeTensor's TensorImpl state, the Python dispatch key and the
// Python-answered device that make it one again (what Tensor._make_subclass sets for it).
__attribute__((visibility("default"))) void phantora_fake_tensor_impl(void* impl) {
  auto* t = static_cast<c10::TensorImpl*>(impl);
  t->set_python_custom_device(true);
  t->set_python_dispatch(true);
}
}
