// phantora op recorder: the dispatcher's own view of the op stream, as torch.profiler sees it.
//
// torch.profiler records every at::RecordFunction of scope FUNCTION (each dispatcher call:
// composite ops and their children, ops on CPU tensors, the calls kernels make) and
// BACKWARD_FUNCTION (autograd nodes) as a `cpu_op`, nested by time. The simulated profile
// needs the same tree; the capture mode (a TorchDispatchMode) only sees the ops that reach
// the Python dispatch key. This file registers one global RecordFunction callback that
// records what the profiler would, stamped with the *simulated* host time:
//
//   - `phantora_sim_now_ns`: the rank's virtual clock, mirrored here by the Python side on
//     every change, read at the start and end of each recorded call;
//   - ids come from one counter shared with the Python side (External ids of the trace);
//   - per-thread flags (struct RecTls, read and written by Python through its address):
//     `suppress` > 0 hides everything the thread dispatches meanwhile (the capture mode
//     faking an op: FakeTensorMode's own calls are not the CUDA kernel's; set through
//     phantora_rec_quiet, which also switches RecordFunction off meanwhile), `skip_next` hides
//     the next call only (the mode re-dispatching the op it was given, which would record
//     the same op twice), and `open_id` / `open_name` / `depth` describe the innermost
//     recorded call still running (the op the capture mode is handling: its record's id
//     becomes the captured op's External id), `outer_id` / `outer_name` the one around it
//     (the op itself when its autograd kernel opened a record of its own, as `detach` does);
//   - finished records are kept per thread as JSON text; `phantora_rec_drain` hands them all
//     over as one JSON array and forgets them.
//
// A record is [id, parent id, thread (0 = the thread that called phantora_rec_set_main, else
// 1), start ns, end ns, name, sequence nr, forward thread id, depth, Input Dims, Input type,
// Input Strides, Concrete Inputs], the last four as torch.profiler writes them with
// record_shapes=True (tensor lists longer than 30 have no shapes, as in
// TENSOR_LIST_DISPLAY_LENGTH_LIMIT; scalar lists longer than 30 are "Other").
//
// Never recorded: `prim::` ops (tensor metadata queries that exist only for Python tensor
// subclasses) and torch's "PythonDispatchMode" / "PythonSubclass" records around a Python
// dispatch (the capture mode's, and FakeTensor's): a CUDA build dispatches none of these for
// real CUDA tensors. (A script's own TorchDispatchMode loses its "PythonDispatchMode" records.)
// A script's tensor subclass (a DTensor op) does get its "PythonSubclass" record, as on a GPU,
// but from the capture mode (phantora_rec_open_subclass): with a dispatch mode active, torch
// hands the op to the subclass from Python and records no "PythonSubclass" itself.

#include <ATen/record_function.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/List.h>
#include <c10/core/ScalarType.h>

#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

extern "C" {
// The simulated host clock (ns), written by the Python side.
__attribute__((visibility("default"))) int64_t phantora_sim_now_ns = 0;
}

namespace phantora {
namespace rec {
namespace {

constexpr size_t kListLimit = 30;  // torch.profiler's TENSOR_LIST_DISPLAY_LENGTH_LIMIT / SCALAR_LIST_LENGTH_LIMIT

// Shared with Python (ctypes.Structure in runtime/dispatch/op_recorder.py): keep the layout in sync.
struct RecTls {
  int32_t suppress;
  int32_t skip_next;
  int64_t open_id;
  const char* open_name;
  int32_t depth;
  int32_t is_main;
  int64_t outer_id;  // the record around the innermost one (0 if none)
  const char* outer_name;
  int32_t subclass_open;  // "PythonSubclass" records open: Python running now is a tensor subclass's dispatch
};

struct Open {
  int64_t id;
  int64_t parent;
  int64_t t0;
  const char* name;
  int64_t seq;
  uint64_t fwd;
  int32_t depth;
  std::string inputs;
  bool synthetic = false;  // opened by phantora_rec_open_subclass; closed with the record below it
};

struct ThreadBuf {
  RecTls tls{};
  std::vector<Open> stack;
  std::mutex mu;  // guards `out`/`count` (drained from any thread)
  std::string out;
  size_t count = 0;
};

std::atomic<int64_t> g_next_id{1};
std::mutex g_threads_mu;
std::vector<ThreadBuf*>* g_threads = new std::vector<ThreadBuf*>();  // leaked: threads may outlive statics
std::atomic<bool> g_enabled{false};
// Called before a record is stamped (start and end): charges the Python the thread ran since
// the clock was last read (runtime/host/pyhost.py), so that work lies between records, where
// a real profile shows it, and not inside the next one. Set by the Python side; may be null.
std::atomic<void (*)()> g_charge{nullptr};
std::atomic<bool> g_inputs{true};
at::CallbackHandle g_handle = 0;
std::string* g_drained = new std::string();
std::mutex g_names_mu;
std::unordered_set<std::string>* g_names = new std::unordered_set<std::string>();  // leaked: pointers escape

// A stable pointer to a copy of `name`. A dispatcher op's name lives as long as the op, but
// any other record's (an autograd node, "autograd::engine::evaluate_function: ...") only as
// long as the record, and its address is reused; the Python side caches names by address.
const char* stable_name(const char* name) {
  thread_local std::unordered_map<const char*, const char*> seen;
  auto it = seen.find(name);
  if (it != seen.end() && std::strcmp(it->second, name) == 0) {
    return it->second;
  }
  const char* interned;
  {
    std::lock_guard<std::mutex> lock(g_names_mu);
    interned = g_names->emplace(name).first->c_str();
  }
  seen[name] = interned;
  return interned;
}

ThreadBuf* tbuf() {
  thread_local ThreadBuf* buf = nullptr;
  if (buf == nullptr) {
    buf = new ThreadBuf();  // leaked with the thread: its records may still be drained
    std::lock_guard<std::mutex> lock(g_threads_mu);
    g_threads->push_back(buf);
  }
  return buf;
}

struct Ctx final : public at::ObserverContext {
  explicit Ctx(int64_t i) : id(i) {}
  int64_t id;
};

inline int64_t now() {
  return __atomic_load_n(&phantora_sim_now_ns, __ATOMIC_RELAXED);
}

void put_int(std::string& s, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  s.append(buf, r.ptr);
}

void put_json_string(std::string& s, const char* p, size_t n) {
  s.push_back('"');
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(p[i]);
    if (c == '"' || c == '\\') {
      s.push_back('\\');
      s.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      s.append(buf);
    } else {
      s.push_back(static_cast<char>(c));
    }
  }
  s.push_back('"');
}

void put_json_string(std::string& s, const char* p) {
  put_json_string(s, p, std::strlen(p));
}

void put_int_list(std::string& s, c10::IntArrayRef v) {
  s.push_back('[');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s.push_back(',');
    put_int(s, v[i]);
  }
  s.push_back(']');
}

// Concrete Inputs text of a scalar, as the profiler prints an IValue ("15", "False", "1e-05").
void put_scalar_text(std::string& s, const c10::IValue& v) {
  if (v.isBool()) {
    s += v.toBool() ? "True" : "False";
  } else if (v.isInt()) {
    put_int(s, v.toInt());
  } else if (v.isDouble()) {
    // c10's IValue printer: an integral double below 1e10 as "1." / "0." / "-0." (the profiler's
    // "0." for SDPA's dropout_p), any other with 17 significant digits
    double d = v.toDouble();
    int c = std::fpclassify(d);
    char buf[40];
    if ((c == FP_NORMAL || c == FP_ZERO) && std::abs(d) < 1e10 && double(int64_t(d)) == d) {
      std::snprintf(buf, sizeof(buf), "%s%lld.", (d == 0 && std::signbit(d)) ? "-" : "",
                    static_cast<long long>(int64_t(d)));
    } else {
      std::snprintf(buf, sizeof(buf), "%.17g", d);
    }
    s += buf;
  } else if (v.isComplexDouble()) {
    auto c = v.toComplexDouble();
    char buf[90];
    std::snprintf(buf, sizeof(buf), "%.17g+%.17gj", c.real(), c.imag());
    s += buf;
  }
}

bool tensor_ok(const at::Tensor& t) {
  return t.defined() && !t.is_nested() && !t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

// The four record_shapes lists of one call, as "[dims],[types],[strides],[concrete]".
void encode_inputs(std::string& out, c10::ArrayRef<const c10::IValue> inputs) {
  std::string dims = "[", types = "[", strides = "[", conc = "[";
  bool first = true;
  for (const auto& v : inputs) {
    if (!first) {
      dims.push_back(',');
      types.push_back(',');
      strides.push_back(',');
      conc.push_back(',');
    }
    first = false;
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      if (tensor_ok(t)) {
        put_int_list(dims, t.sizes());
        auto tn = t.dtype().name();
        put_json_string(types, tn.data(), tn.size());
        if (t.layout() == at::kStrided) {
          put_int_list(strides, t.strides());
        } else {
          strides += "[]";
        }
      } else {
        dims += "[]";
        types += "\"\"";
        strides += "[]";
      }
      conc += "\"\"";
    } else if (v.isScalar()) {
      dims += "[]";
      types += "\"Scalar\"";
      strides += "[]";
      conc.push_back('"');
      put_scalar_text(conc, v);
      conc.push_back('"');
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      types += "\"TensorList\"";
      conc += "\"\"";
      if (list.size() > kListLimit) {
        dims += "[]";
        strides += "[]";
      } else {
        dims.push_back('[');
        strides.push_back('[');
        for (size_t i = 0; i < list.size(); ++i) {
          if (i) {
            dims.push_back(',');
            strides.push_back(',');
          }
          at::Tensor t = list.get(i);
          if (tensor_ok(t)) {
            put_int_list(dims, t.sizes());
            if (t.layout() == at::kStrided) {
              put_int_list(strides, t.strides());
            } else {
              strides += "[]";
            }
          } else {
            dims += "[]";
            strides += "[]";
          }
        }
        dims.push_back(']');
        strides.push_back(']');
      }
    } else if (v.isList() && v.toListRef().size() <= kListLimit &&
               (v.toListRef().empty() || v.toListRef()[0].isScalar())) {
      auto ref = v.toListRef();
      dims += "[]";
      types += "\"ScalarList\"";
      strides += "[]";
      conc += "\"[";
      for (size_t i = 0; i < ref.size(); ++i) {
        if (i) conc += ", ";
        put_scalar_text(conc, ref[i]);
      }
      conc += "]\"";
    } else {
      dims += "[]";
      types += "\"\"";
      strides += "[]";
      conc += "\"\"";
    }
  }
  dims.push_back(']');
  types.push_back(']');
  strides.push_back(']');
  conc.push_back(']');
  out.reserve(out.size() + dims.size() + types.size() + strides.size() + conc.size() + 4);
  out += dims;
  out.push_back(',');
  out += types;
  out.push_back(',');
  out += strides;
  out.push_back(',');
  out += conc;
}

void emit(ThreadBuf* b, const Open& o, int64_t t1);

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  ThreadBuf* b = tbuf();
  RecTls& tls = b->tls;
  if (tls.suppress > 0) {
    return nullptr;
  }
  if (tls.skip_next > 0) {
    --tls.skip_next;
    return nullptr;
  }
  const char* name = fn.name();
  if (name == nullptr || std::strncmp(name, "prim::", 6) == 0 || std::strncmp(name, "Python", 6) == 0) {
    return nullptr;
  }
  name = stable_name(name);
  if (auto charge = g_charge.load(std::memory_order_relaxed)) {
    charge();
  }
  int64_t id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  Open o;
  o.id = id;
  o.parent = b->stack.empty() ? 0 : b->stack.back().id;
  o.t0 = now();
  o.name = name;
  o.seq = fn.seqNr();
  o.fwd = fn.forwardThreadId();
  o.depth = static_cast<int32_t>(b->stack.size());
  if (g_inputs.load(std::memory_order_relaxed) && fn.needsInputs()) {
    encode_inputs(o.inputs, fn.inputs());
  } else {
    o.inputs = "[],[],[],[]";
  }
  b->stack.push_back(std::move(o));
  tls.outer_id = tls.open_id;
  tls.outer_name = tls.open_name;
  tls.open_id = id;
  tls.open_name = name;
  tls.depth = static_cast<int32_t>(b->stack.size());
  return std::make_unique<Ctx>(id);
}

void on_end(const at::RecordFunction& /*fn*/, at::ObserverContext* ctx_ptr) {
  if (ctx_ptr == nullptr) {
    return;
  }
  int64_t id = static_cast<Ctx*>(ctx_ptr)->id;
  ThreadBuf* b = tbuf();
  auto& st = b->stack;
  // LIFO on the thread that started it (FUNCTION/BACKWARD_FUNCTION calls are synchronous);
  // anything else (a record ended elsewhere) is searched for, and dropped if not found.
  size_t pos = st.size();
  while (pos > 0 && st[pos - 1].id != id) {
    --pos;
  }
  if (pos == 0) {
    return;
  }
  if (auto charge = g_charge.load(std::memory_order_relaxed)) {
    charge();
  }
  int64_t t1 = now();
  // "PythonSubclass" records opened inside this one end with it (the subclass's dispatch
  // returns when the op it was given does)
  for (size_t i = st.size(); i > pos; --i) {
    if (st[i - 1].synthetic) {
      Open inner = std::move(st[i - 1]);
      st.erase(st.begin() + static_cast<std::ptrdiff_t>(i - 1));
      emit(b, inner, t1);
    }
  }
  Open o = std::move(st[pos - 1]);
  st.erase(st.begin() + static_cast<std::ptrdiff_t>(pos - 1));
  emit(b, o, t1);
}

// "PythonSubclass" records open on a thread's stack (RecTls.subclass_open).
int32_t count_subclass(const std::vector<Open>& st) {
  int32_t n = 0;
  for (const Open& o : st) {
    n += o.synthetic ? 1 : 0;
  }
  return n;
}

// Write a finished record to the thread's buffer; the thread's flags describe its stack after.
void emit(ThreadBuf* b, const Open& o, int64_t t1) {
  auto& st = b->stack;
  RecTls& tls = b->tls;
  tls.subclass_open = count_subclass(st);
  size_t n = st.size();
  tls.open_id = n > 0 ? st[n - 1].id : 0;
  tls.open_name = n > 0 ? st[n - 1].name : nullptr;
  tls.outer_id = n > 1 ? st[n - 2].id : 0;
  tls.outer_name = n > 1 ? st[n - 2].name : nullptr;
  tls.depth = static_cast<int32_t>(st.size());
  std::lock_guard<std::mutex> lock(b->mu);
  std::string& s = b->out;
  s.push_back('[');
  put_int(s, o.id);
  s.push_back(',');
  put_int(s, o.parent);
  s += tls.is_main ? ",0," : ",1,";
  put_int(s, o.t0);
  s.push_back(',');
  put_int(s, t1);
  s.push_back(',');
  put_json_string(s, o.name);
  s.push_back(',');
  put_int(s, o.seq);
  s.push_back(',');
  put_int(s, static_cast<int64_t>(o.fwd));
  s.push_back(',');
  put_int(s, o.depth);
  s.push_back(',');
  s += o.inputs;
  s += "],";
  ++b->count;
}

}  // namespace
}  // namespace rec
}  // namespace phantora

using namespace phantora::rec;

extern "C" {

// Start recording (idempotent). `with_inputs`: record the record_shapes lists.
__attribute__((visibility("default"))) int phantora_rec_enable(int with_inputs) {
  g_inputs.store(with_inputs != 0);
  bool expected = false;
  if (!g_enabled.compare_exchange_strong(expected, true)) {
    return 0;
  }
  g_handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_start, &on_end)
          .needsInputs(with_inputs != 0)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  return 1;
}

__attribute__((visibility("default"))) void phantora_rec_disable() {
  bool expected = true;
  if (g_enabled.compare_exchange_strong(expected, false)) {
    at::removeCallback(g_handle);
    g_handle = 0;
  }
}

// The calling thread is the script's main thread (records say thread 0).
__attribute__((visibility("default"))) void phantora_rec_set_main() {
  tbuf()->tls.is_main = 1;
}

// Address of the calling thread's flags (struct RecTls).
__attribute__((visibility("default"))) void* phantora_rec_tls() {
  return &tbuf()->tls;
}

// Hide (on != 0) or show again what this thread dispatches; returns the previous state.
// Hiding switches RecordFunction off for the thread, so the dispatcher calls made meanwhile
// (FakeTensorMode faking an op: tens of them) cost nothing here, not even the boxing of
// their inputs; `suppress` is set too, for records begun by other means.
__attribute__((visibility("default"))) int phantora_rec_quiet(int on) {
  RecTls& tls = tbuf()->tls;
  int prev = tls.suppress > 0 ? 1 : 0;
  tls.suppress = on ? 1 : 0;
  at::enableRecordFunction(on == 0);
  return prev;
}

// Open a "PythonSubclass" record inside the innermost open record of this thread: the capture
// mode hands that op to a tensor subclass's own dispatch (a DTensor op). It ends with the op.
// Returns its id, or 0 when nothing is recorded (hidden, no op open, or already open).
__attribute__((visibility("default"))) int64_t phantora_rec_open_subclass() {
  ThreadBuf* b = tbuf();
  RecTls& tls = b->tls;
  auto& st = b->stack;
  if (!g_enabled.load(std::memory_order_relaxed) || tls.suppress > 0 || st.empty() || st.back().synthetic) {
    return 0;
  }
  Open o;
  o.id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  o.parent = st.back().id;
  o.t0 = now();
  o.name = stable_name("PythonSubclass");
  o.seq = -1;
  o.fwd = 0;
  o.depth = static_cast<int32_t>(st.size());
  o.inputs = st.back().inputs;
  o.synthetic = true;
  int64_t id = o.id;
  st.push_back(std::move(o));
  tls.outer_id = tls.open_id;
  tls.outer_name = tls.open_name;
  tls.open_id = id;
  tls.open_name = st.back().name;
  tls.depth = static_cast<int32_t>(st.size());
  tls.subclass_open = count_subclass(st);
  return id;
}

// The function that charges the thread's pending Python before a record is stamped (or null).
__attribute__((visibility("default"))) void phantora_rec_set_charge(void (*charge)()) {
  g_charge.store(charge, std::memory_order_relaxed);
}

// A fresh id from the counter the records use.
__attribute__((visibility("default"))) int64_t phantora_rec_next_id() {
  return g_next_id.fetch_add(1, std::memory_order_relaxed);
}

// Number of finished records not yet drained (all threads).
__attribute__((visibility("default"))) int64_t phantora_rec_pending() {
  std::lock_guard<std::mutex> lock(g_threads_mu);
  int64_t n = 0;
  for (ThreadBuf* b : *g_threads) {
    std::lock_guard<std::mutex> l2(b->mu);
    n += static_cast<int64_t>(b->count);
  }
  return n;
}

// All finished records as one JSON array; `*data` stays valid until the next drain.
__attribute__((visibility("default"))) int64_t phantora_rec_drain(const char** data) {
  std::lock_guard<std::mutex> lock(g_threads_mu);
  std::string& out = *g_drained;
  out.clear();
  out.push_back('[');
  for (ThreadBuf* b : *g_threads) {
    std::lock_guard<std::mutex> l2(b->mu);
    if (b->count == 0) {
      continue;
    }
    out += b->out;
    b->out.clear();
    b->count = 0;
  }
  if (out.size() > 1) {
    out.back() = ']';  // the last record's trailing comma
  } else {
    out.push_back(']');
  }
  *data = out.data();
  return static_cast<int64_t>(out.size());
}

}  // extern "C"
