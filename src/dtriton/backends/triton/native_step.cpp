// The native step (issue 15): a differentiable call signature seen before, run as a C++ autograd
// node whose forward and backward launch the compiled Triton kernels through the CUDA driver,
// with no Python frame in the backward. Built on first use by dtriton.backends.triton.native
// (torch.utils.cpp_extension), which also fills the plans: every decision (grids, argument bytes,
// allocations, which kernel reads which address) is taken in Python; this file only carries them out.
//
// A kernel's call cache (CallCache) keys its native steps by the call's tensors (shapes, strides,
// dtypes, devices, alignment), so a steady call runs with no Python frame after its first lines.
//
// A launcher plan: the addresses of a call are the inputs named by `arg_reads`, then one fresh
// allocation per `allocs` entry, then the stream's arrival counters (when the plan has them);
// each kernel's parameters are a byte arena packed in Python, into which the pointer parameters'
// addresses (an address plus a byte offset) are written per call.

#include <torch/extension.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/Exceptions.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <ATen/EmptyTensor.h>
#include <torch/csrc/autograd/python_variable.h>

#include <dlfcn.h>
#include <cstring>
#include <memory>
#include <atomic>
#include <mutex>
#include <type_traits>

#include "cuda.h"

namespace py = pybind11;
using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;
using NodePtr = decltype(torch::autograd::Edge().function);

namespace {

// -- the CUDA driver, opened at the first launch (the module loads without a GPU) -------------
typedef CUresult (*LaunchEx)(const CUlaunchConfig*, CUfunction, void**, void**);
typedef CUresult (*CtxGetCurrent)(CUcontext*);
typedef CUresult (*CtxSetCurrent)(CUcontext);
typedef CUresult (*DeviceGet)(CUdevice*, int);
typedef CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice);
typedef CUresult (*ErrorString)(CUresult, const char**);

struct Driver {
  LaunchEx launch = nullptr;
  CtxGetCurrent ctx_current = nullptr;
  CtxSetCurrent ctx_set_current = nullptr;
  DeviceGet device_get = nullptr;
  PrimaryCtxRetain primary_ctx_retain = nullptr;
  ErrorString error_string = nullptr;
};

const Driver& driver() {
  static Driver d = [] {
    Driver r;
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(h != nullptr, "dtriton native step: cannot open libcuda.so.1 (", dlerror(), ")");
    r.launch = reinterpret_cast<LaunchEx>(dlsym(h, "cuLaunchKernelEx"));
    r.ctx_current = reinterpret_cast<CtxGetCurrent>(dlsym(h, "cuCtxGetCurrent"));
    r.ctx_set_current = reinterpret_cast<CtxSetCurrent>(dlsym(h, "cuCtxSetCurrent"));
    r.device_get = reinterpret_cast<DeviceGet>(dlsym(h, "cuDeviceGet"));
    r.primary_ctx_retain = reinterpret_cast<PrimaryCtxRetain>(dlsym(h, "cuDevicePrimaryCtxRetain"));
    r.error_string = reinterpret_cast<ErrorString>(dlsym(h, "cuGetErrorString"));
    TORCH_CHECK(r.launch && r.ctx_current && r.ctx_set_current && r.device_get && r.primary_ctx_retain &&
                r.error_string, "dtriton native step: libcuda.so.1 lacks a driver entry point it needs");
    return r;
  }();
  return d;
}

struct Kernel {
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block = 32;
  unsigned ctas = 1;
  unsigned shared = 0;
  bool cooperative = false;
  bool pdl = false;
  std::vector<uint8_t> arena;             // every parameter's bytes (pointers written per call)
  std::vector<int64_t> offsets;           // each parameter's byte offset in the arena
  std::vector<std::array<int64_t, 3>> ptrs;  // (parameter, address index, byte offset)
};

struct Alloc {
  std::vector<int64_t> shape;
  at::TensorOptions options;
  at::ScalarType dtype = at::kFloat;
  c10::Allocator* allocator = nullptr;    // the allocator of the plan's example tensor (the device's caching allocator)
  bool zero = false;
};

struct Launcher {
  c10::Device device{c10::DeviceType::CUDA, 0};
  std::vector<int64_t> arg_reads;
  std::vector<Alloc> allocs;
  std::vector<Kernel> kernels;
  std::vector<int64_t> returns;           // allocation indices, in the order returned
  uint64_t counter_stream = 0;            // the stream whose arrival counters `counters` are
  at::Tensor counters;                    // undefined: the plan reads none (held: the pool may replace it)
};

// the stream a launch on `device` goes to now (the caller's current stream)
uint64_t current_stream(const c10::Device& device) {
  c10::impl::VirtualGuardImpl impl(device.type());
  return reinterpret_cast<uint64_t>(impl.getStream(device).native_handle());
}

// the bytes of a launch's parameters: on the stack up to this many (plans with more use the heap)
constexpr size_t kStackArena = 1024;
constexpr size_t kStackParams = 96;

void launch(const Kernel& k, const uint64_t* addr, CUstream stream) {
  alignas(8) uint8_t stack_arena[kStackArena];
  void* stack_params[kStackParams];
  std::vector<uint8_t> heap_arena;
  std::vector<void*> heap_params;
  uint8_t* arena = stack_arena;
  void** params = stack_params;
  if (k.arena.size() > kStackArena) {
    heap_arena.resize(k.arena.size());
    arena = heap_arena.data();
  }
  if (k.offsets.size() > kStackParams) {
    heap_params.resize(k.offsets.size());
    params = heap_params.data();
  }
  std::memcpy(arena, k.arena.data(), k.arena.size());
  for (const auto& p : k.ptrs) {
    uint64_t a = addr[p[1]] + static_cast<uint64_t>(p[2]);
    std::memcpy(arena + k.offsets[p[0]], &a, sizeof(a));
  }
  for (size_t i = 0; i < k.offsets.size(); ++i) params[i] = arena + k.offsets[i];
  CUlaunchAttribute attrs[4];
  unsigned n_attrs = 0;
  if (k.pdl) {
    attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n_attrs++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (k.cooperative) {
    attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[n_attrs++].value.cooperative = 1;
  }
  if (k.ctas != 1) {
    attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n_attrs].value.clusterDim.x = k.ctas;
    attrs[n_attrs].value.clusterDim.y = 1;
    attrs[n_attrs++].value.clusterDim.z = 1;
    attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attrs[n_attrs++].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
  }
  CUlaunchConfig config;
  std::memset(&config, 0, sizeof(config));
  config.gridDimX = k.grid[0] * k.ctas;
  config.gridDimY = k.grid[1];
  config.gridDimZ = k.grid[2];
  config.blockDimX = k.block;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = k.shared;
  config.hStream = stream;
  config.attrs = attrs;
  config.numAttrs = n_attrs;
  const Driver& d = driver();
  CUresult r = d.launch(&config, k.function, params, nullptr);
  if (r != CUDA_SUCCESS) {
    const char* msg = nullptr;
    d.error_string(r, &msg);
    TORCH_CHECK(false, "dtriton native step: kernel launch failed: ", msg ? msg : "unknown CUDA error");
  }
}

// A thread on which nothing has used CUDA yet may have no current context (torch binds one lazily):
// make the device's primary context current, as Triton's launcher does
void ensure_context(const c10::Device& device) {
  const Driver& d = driver();
  CUcontext ctx = nullptr;
  d.ctx_current(&ctx);
  if (ctx != nullptr) return;
  CUdevice dev = 0;
  TORCH_CHECK(d.device_get(&dev, device.index()) == CUDA_SUCCESS &&
              d.primary_ctx_retain(&ctx, dev) == CUDA_SUCCESS && d.ctx_set_current(ctx) == CUDA_SUCCESS,
              "dtriton native step: cannot make the primary CUDA context of device ", device.index(), " current");
}

// A fresh tensor as a plan allocates it: straight from the device's caching allocator (no dispatch)
// where the plan knows it, else through at::empty / at::zeros
at::Tensor fresh_tensor(const Alloc& a) {
  if (a.zero) return at::zeros(a.shape, a.options);
  if (a.allocator == nullptr) return at::empty(a.shape, a.options);
  constexpr c10::DispatchKeySet cuda_keys(c10::DispatchKey::CUDA);
  return at::Tensor(at::detail::empty_generic(a.shape, a.allocator, cuda_keys, a.dtype, std::nullopt));
}

// One run's memory: every address the kernels read (the inputs named by `arg_reads`, the fresh
// allocations, the arrival counters) and the fresh tensors. Under the caller's device guard.
struct Run {
  std::vector<uint64_t> addr;
  std::vector<at::Tensor> fresh;
};

Run allocate(const Launcher& L, const std::vector<at::Tensor>& in) {
  Run r;
  r.addr.reserve(L.arg_reads.size() + L.allocs.size() + 1);
  for (int64_t p : L.arg_reads) r.addr.push_back(reinterpret_cast<uint64_t>(in[p].data_ptr()));
  r.fresh.reserve(L.allocs.size());
  for (const Alloc& a : L.allocs) {
    r.fresh.push_back(fresh_tensor(a));
    r.addr.push_back(reinterpret_cast<uint64_t>(r.fresh.back().data_ptr()));
  }
  if (L.counters.defined()) r.addr.push_back(reinterpret_cast<uint64_t>(L.counters.data_ptr()));
  return r;
}

// The plan's returned allocations of run `r`, in the order returned
std::vector<at::Tensor> returned(const Launcher& L, const Run& r) {
  std::vector<at::Tensor> out;
  out.reserve(L.returns.size());
  for (int64_t i : L.returns) out.push_back(r.fresh[i]);
  return out;
}

void launch_all(const Launcher& L, const Run& r, uint64_t stream) {
  for (const Kernel& k : L.kernels) launch(k, r.addr.data(), reinterpret_cast<CUstream>(stream));
}

// Whether `L` can run on `stream` (a plan reading arrival counters runs on their stream only)
bool runs_on(const Launcher& L, uint64_t stream) {
  return !L.counters.defined() || stream == L.counter_stream;
}

// Run every kernel of `L` on `in`; returns the plan's returned allocations, or nothing (an empty
// vector and `ok` false) when the current stream is not the one whose arrival counters it reads.
std::vector<at::Tensor> run_launcher(const Launcher& L, const std::vector<at::Tensor>& in, bool& ok) {
  c10::DeviceGuard guard(L.device);
  uint64_t stream = current_stream(L.device);
  ok = runs_on(L, stream);
  if (!ok) return {};
  ensure_context(L.device);
  Run r = allocate(L, in);
  launch_all(L, r, stream);
  return returned(L, r);
}

struct GradKey {
  bool defined = false;
  std::vector<int64_t> strides;
  bool aligned = false;
};

struct BackwardVariant {
  std::vector<bool> needs;                // per forward input: whether it needs a gradient
  std::vector<GradKey> grads;             // per output: the incoming gradient's layout
  std::vector<Launcher> launchers;        // run in order, each on (*inputs, *gradients, *saved)
  std::vector<std::array<int64_t, 2>> pick;  // per forward input: (launcher, index among its returns), or -1s
  std::vector<std::pair<int64_t, at::Tensor>> zeros;  // (output, the zero the launcher reads as its absent gradient)
  int64_t* log = nullptr;                 // where a run of this variant writes `tag` (launch_counts; null: nowhere)
  int64_t tag = 0;
};

struct Step {
  std::string name;
  Launcher forward;                       // runs on the inputs; returns outputs then saved values
  int64_t n_out = 1;
  std::vector<int64_t> save;              // forward returns saved for the backward (after the inputs)
  // replaced whole (copy on write) when a variant is added: a backward running on another thread
  // keeps reading the list it loaded
  std::shared_ptr<const std::vector<BackwardVariant>> backwards = std::make_shared<std::vector<BackwardVariant>>();
  py::object fallback;                    // fallback(inputs, saved, grads, needs) -> gradients
};

std::mutex registry_mutex;
// never destroyed: a step holds a Python callable, which must not be released after the interpreter
// has finalised (at exit)
std::vector<std::shared_ptr<Step>>& registry() {
  static auto* r = new std::vector<std::shared_ptr<Step>>();
  return *r;
}

std::shared_ptr<Step> step_of(int64_t id) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(registry().size()), "dtriton native step: unknown step ", id);
  return registry()[id];
}

bool matches(const BackwardVariant& v, const std::vector<bool>& needs, const variable_list& grads) {
  if (v.needs != needs || v.grads.size() != grads.size()) return false;
  for (size_t i = 0; i < grads.size(); ++i) {
    const GradKey& k = v.grads[i];
    const at::Tensor& g = grads[i];
    if (k.defined != g.defined()) return false;
    if (!g.defined()) continue;
    if (!g.has_storage()) return false;   // (batched gradients of a torch.func transform: the Python path refuses them)
    if (k.aligned != (reinterpret_cast<uint64_t>(g.data_ptr()) % 16 == 0)) return false;
    auto s = g.strides();
    if (static_cast<size_t>(s.size()) != k.strides.size() || !std::equal(s.begin(), s.end(), k.strides.begin()))
      return false;
  }
  return true;
}

// (torch before 2.12 or so holds nodes in std::shared_ptr, later ones in c10::intrusive_ptr; `P` keeps
// the branch not taken a dependent, uninstantiated one)
template <class N, class P = NodePtr>
P self_of(N* node) {
  if constexpr (std::is_same_v<P, std::shared_ptr<Node>>) {
    return node->shared_from_this();
  } else {
    return P::reclaim_copy(node);
  }
}

struct StepBackward : public Node {
  std::shared_ptr<Step> step;
  std::vector<SavedVariable> inputs;
  std::vector<SavedVariable> saved;
  bool released = false;

  std::string name() const override { return "DtritonStepBackward"; }

  void release_variables() override {
    inputs.clear();
    saved.clear();
    released = true;
  }

  variable_list apply(variable_list&& grads) override {
    TORCH_CHECK(!released, "dtriton step ", step->name, ": trying to backward through the graph a second time; "
                "specify retain_graph=True on the first backward");
    NodePtr self = self_of(this);
    std::vector<at::Tensor> ins, st;
    for (auto& v : inputs) ins.push_back(v.unpack(self));
    for (auto& v : saved) st.push_back(v.unpack(self));
    std::vector<bool> needs(num_outputs());
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = next_edge(i).is_valid();
    if (!at::GradMode::is_enabled()) {
      auto variants = std::atomic_load(&step->backwards);
      for (const auto& v : *variants) {
        if (!matches(v, needs, grads)) continue;
        std::vector<at::Tensor> bargs(ins);
        bargs.insert(bargs.end(), grads.begin(), grads.end());
        for (const auto& z : v.zeros) bargs[ins.size() + z.first] = z.second;
        bargs.insert(bargs.end(), st.begin(), st.end());
        bool ok = true;
        for (const Launcher& L : v.launchers)   // arrival counters of another stream: the Python path
          ok = ok && (!L.counters.defined() || current_stream(L.device) == L.counter_stream);
        if (!ok) break;
        std::vector<std::vector<at::Tensor>> vals;
        for (const Launcher& L : v.launchers) vals.push_back(run_launcher(L, bargs, ok));
        variable_list res(v.pick.size());
        for (size_t i = 0; i < v.pick.size(); ++i)
          if (v.pick[i][0] >= 0) res[i] = vals[v.pick[i][0]][v.pick[i][1]];
        if (v.log != nullptr) __atomic_store_n(v.log, v.tag, __ATOMIC_RELAXED);
        return res;
      }
    }
    // the general path (a new gradient layout, a stream without the plan's counters, create_graph)
    py::gil_scoped_acquire gil;
    try {
      py::list g;
      for (const auto& t : grads) g.append(t.defined() ? py::cast(t) : py::none());
      py::object r = step->fallback(ins, st, g, needs);
      variable_list res;
      for (auto item : r) res.push_back(item.is_none() ? at::Tensor() : item.cast<at::Tensor>());
      TORCH_CHECK(res.size() == num_outputs(), "dtriton step ", step->name, ": the backward returned ", res.size(),
                  " gradients for ", num_outputs(), " inputs");
      return res;
    } catch (py::error_already_set& e) {
      e.restore();
      python_error err;   // (fetched now: the thread's Python error state is not kept past this frame)
      err.persist();
      throw err;
    }
  }
};

template <class N, class P = NodePtr>
P make_node() {
  if constexpr (std::is_same_v<P, std::shared_ptr<Node>>) {
    return std::shared_ptr<N>(new N());
  } else {
    return c10::make_intrusive<N>();
  }
}

// -- plans from Python -------------------------------------------------------------------------
Launcher launcher_of(const py::dict& d) {
  Launcher L;
  L.device = c10::Device(c10::DeviceType::CUDA, d["device"].cast<int64_t>());
  L.arg_reads = d["arg_reads"].cast<std::vector<int64_t>>();
  for (auto a : d["allocs"].cast<py::list>()) {
    auto t = a.cast<py::tuple>();
    Alloc al;
    al.shape = t[0].cast<std::vector<int64_t>>();
    at::Tensor example = t[1].cast<at::Tensor>();
    al.options = example.options();
    al.dtype = example.scalar_type();
    if (example.is_cuda() && example.has_storage()) al.allocator = example.storage().allocator();
    al.zero = t[2].cast<bool>();
    L.allocs.push_back(std::move(al));
  }
  for (auto kk : d["kernels"].cast<py::list>()) {
    auto kd = kk.cast<py::dict>();
    Kernel k;
    k.function = reinterpret_cast<CUfunction>(kd["function"].cast<uint64_t>());
    auto grid = kd["grid"].cast<std::vector<int64_t>>();
    for (int i = 0; i < 3; ++i) k.grid[i] = static_cast<unsigned>(grid[i]);
    k.block = kd["block"].cast<unsigned>();
    k.ctas = kd["ctas"].cast<unsigned>();
    k.shared = kd["shared"].cast<unsigned>();
    k.cooperative = kd["cooperative"].cast<bool>();
    k.pdl = kd["pdl"].cast<bool>();
    std::string bytes = kd["arena"].cast<std::string>();
    k.arena.assign(bytes.begin(), bytes.end());
    k.offsets = kd["offsets"].cast<std::vector<int64_t>>();
    for (auto p : kd["ptrs"].cast<py::list>()) {
      auto t = p.cast<std::vector<int64_t>>();
      k.ptrs.push_back({t[0], t[1], t[2]});
    }
    L.kernels.push_back(std::move(k));
  }
  L.returns = d["returns"].cast<std::vector<int64_t>>();
  L.counter_stream = d["counter_stream"].cast<uint64_t>();
  if (!d["counters"].is_none()) L.counters = d["counters"].cast<at::Tensor>();
  // the indices Python computed, checked once here rather than per call
  const int64_t n_addr = static_cast<int64_t>(L.arg_reads.size() + L.allocs.size()) + (L.counters.defined() ? 1 : 0);
  for (const Kernel& k : L.kernels)
    for (const auto& p : k.ptrs)
      TORCH_CHECK(p[0] >= 0 && p[0] < static_cast<int64_t>(k.offsets.size()) && p[1] >= 0 && p[1] < n_addr,
                  "dtriton native step: a pointer parameter's slot is out of range");
  for (int64_t r : L.returns)
    TORCH_CHECK(r >= 0 && r < static_cast<int64_t>(L.allocs.size()), "dtriton native step: a return is out of range");
  for (int64_t a : L.arg_reads) TORCH_CHECK(a >= 0, "dtriton native step: a negative argument position");
  return L;
}

int64_t max_read(const Launcher& L) {
  int64_t m = -1;
  for (int64_t a : L.arg_reads) m = std::max(m, a);
  return m;
}

int64_t register_step(const std::string& name, const py::dict& forward, int64_t n_out, std::vector<int64_t> save,
                      py::object fallback) {
  auto s = std::make_shared<Step>();
  s->name = name;
  s->forward = launcher_of(forward);
  s->n_out = n_out;
  s->save = std::move(save);
  s->fallback = std::move(fallback);
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry().push_back(s);
  return static_cast<int64_t>(registry().size()) - 1;
}

void add_backward(int64_t id, std::vector<bool> needs, const py::list& grads, const py::list& launchers,
                  const std::vector<std::vector<int64_t>>& pick, std::vector<std::pair<int64_t, at::Tensor>> zeros,
                  uint64_t log, int64_t tag) {
  BackwardVariant v;
  v.zeros = std::move(zeros);
  v.log = reinterpret_cast<int64_t*>(log);
  v.tag = tag;
  v.needs = std::move(needs);
  for (auto g : grads) {
    GradKey k;
    if (!g.is_none()) {
      auto t = g.cast<py::tuple>();
      k.defined = true;
      k.strides = t[0].cast<std::vector<int64_t>>();
      k.aligned = t[1].cast<bool>();
    }
    v.grads.push_back(std::move(k));
  }
  for (auto l : launchers) v.launchers.push_back(launcher_of(l.cast<py::dict>()));
  TORCH_CHECK(!v.launchers.empty(), "dtriton native step: a backward variant without launchers");
  for (const auto& p : pick) {
    TORCH_CHECK(p.size() == 2, "dtriton native step: a pick is (launcher, index)");
    TORCH_CHECK(p[0] < 0 || (p[0] < static_cast<int64_t>(v.launchers.size()) &&
                             p[1] >= 0 && p[1] < static_cast<int64_t>(v.launchers[p[0]].returns.size())),
                "dtriton native step: a pick is out of range");
    v.pick.push_back({p[0], p[1]});
  }
  auto s = step_of(id);
  for (const auto& z : v.zeros)
    TORCH_CHECK(z.first >= 0 && z.first < static_cast<int64_t>(v.grads.size()), "dtriton native step: a zero's output is out of range");
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto grown = std::make_shared<std::vector<BackwardVariant>>(*std::atomic_load(&s->backwards));
  grown->push_back(std::move(v));
  std::atomic_store(&s->backwards, std::shared_ptr<const std::vector<BackwardVariant>>(std::move(grown)));
}

// A step's forward on `inputs`: outputs (one tensor, or a tuple), or None when the plan cannot run
// on this stream or an input carries a forward-mode tangent (the Python node, which refuses it).
// The node is recorded before the kernels launch: on a host-bound step, the host's work after the
// last launch is what the GPU waits for.
py::object run_forward(const std::shared_ptr<Step>& s, const std::vector<at::Tensor>& inputs) {
  for (const auto& t : inputs)
    if (torch::autograd::isFwGradDefined(t)) return py::none();
  const Launcher& L = s->forward;
  c10::DeviceGuard guard(L.device);
  uint64_t stream = current_stream(L.device);
  if (!runs_on(L, stream)) return py::none();
  ensure_context(L.device);
  Run r;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    r = allocate(L, inputs);
  }
  std::vector<at::Tensor> res = returned(L, r);
  std::vector<at::Tensor> outs(res.begin(), res.begin() + s->n_out);
  if (torch::autograd::compute_requires_grad(inputs)) {
    NodePtr node = make_node<StepBackward>();
    auto* n = static_cast<StepBackward*>(node.get());
    n->step = s;
    n->set_next_edges(torch::autograd::collect_next_edges(inputs));
    for (auto& o : outs) torch::autograd::set_history(o, node);
    for (const auto& t : inputs) n->inputs.emplace_back(t, false);
    for (int64_t k : s->save) n->saved.emplace_back(res[k], k < s->n_out);
  }
  launch_all(L, r, stream);
  if (s->n_out == 1) return py::cast(outs[0]);
  py::tuple t(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) t[i] = py::cast(outs[i]);
  return t;
}

py::object forward(int64_t id, const std::vector<at::Tensor>& inputs) {
  auto s = step_of(id);
  TORCH_CHECK(max_read(s->forward) < static_cast<int64_t>(inputs.size()), "dtriton native step ", s->name,
              ": called with ", inputs.size(), " tensors, fewer than its plan reads");
  return run_forward(s, inputs);
}

// -- the call cache: a kernel's native steps by call signature, keyed in C++ -------------------
// A call's key: per argument (each a strided tensor with storage) its rank, sizes, strides, dtype,
// device and 16-byte alignment: what the Python call key holds for a call whose arguments are all
// tensors. A call whose arguments are not, or that records no autograd node, is a miss.
bool call_key(const py::tuple& args, std::vector<int64_t>& key, std::vector<at::Tensor>& tensors, bool& grad) {
  key.push_back(static_cast<int64_t>(args.size()));
  for (const auto& a : args) {
    if (!THPVariable_Check(a.ptr())) return false;
    const at::Tensor& t = THPVariable_Unpack(a.ptr());
    if (t.layout() != at::kStrided || !t.has_storage()) return false;
    key.push_back(t.dim());
    for (int64_t v : t.sizes()) key.push_back(v);
    for (int64_t v : t.strides()) key.push_back(v);
    key.push_back(static_cast<int64_t>(t.scalar_type()));
    key.push_back(static_cast<int64_t>(t.device().type()) * 4096 + t.device().index());
    key.push_back(reinterpret_cast<uint64_t>(t.data_ptr()) % 16 == 0);
    grad = grad || t.requires_grad();
    tensors.push_back(t);
  }
  return true;
}

struct CacheEntry {
  std::vector<int64_t> key;
  std::shared_ptr<Step> step;
  int64_t tag = 0;
};

struct CallCache {
  // replaced whole when an entry is added (a call on another thread keeps the list it loaded)
  std::shared_ptr<const std::vector<CacheEntry>> entries = std::make_shared<std::vector<CacheEntry>>();
  int64_t* log = nullptr;                 // where a hit writes its entry's tag (launch_counts; null: nowhere)

  // A call: the native step's outputs, or None (a miss: the Python path takes the call)
  py::object call(const py::tuple& args) const {
    if (!at::GradMode::is_enabled() ||
        c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::FuncTorchDynamicLayerFrontMode))
      return py::none();   // (no node to record, or a torch.func transform: the Python path decides)
    std::vector<int64_t> key;
    std::vector<at::Tensor> tensors;
    bool grad = false;
    if (!call_key(args, key, tensors, grad) || !grad) return py::none();
    auto list = std::atomic_load(&entries);
    for (const CacheEntry& e : *list) {
      if (e.key != key) continue;
      py::object res = run_forward(e.step, tensors);
      if (log != nullptr && !res.is_none()) __atomic_store_n(log, e.tag, __ATOMIC_RELAXED);
      return res;
    }
    return py::none();
  }

  // Enter step `id` for calls with the signature of `args` (its forward's tensors), tagged `tag`
  void add(const py::tuple& args, int64_t id, int64_t tag) {
    std::vector<int64_t> key;
    std::vector<at::Tensor> tensors;
    bool grad = false;
    TORCH_CHECK(call_key(args, key, tensors, grad), "dtriton native step: a call cache entry takes strided tensors only");
    auto s = step_of(id);
    TORCH_CHECK(max_read(s->forward) < static_cast<int64_t>(tensors.size()), "dtriton native step ", s->name,
                ": a call cache entry with fewer tensors than its plan reads");
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto grown = std::make_shared<std::vector<CacheEntry>>(*std::atomic_load(&entries));
    grown->push_back(CacheEntry{std::move(key), std::move(s), tag});
    std::atomic_store(&entries, std::shared_ptr<const std::vector<CacheEntry>>(std::move(grown)));
  }
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "dtriton's native step: a C++ autograd node launching compiled Triton kernels";
  m.def("register_step", &register_step, "register a step: (name, forward plan, n_out, save, fallback) -> id");
  m.def("add_backward", &add_backward,
        "add a backward variant to a step (each run of it writes tag to the int64 at address log, unless 0)");
  m.def("forward", &forward, "run a step's forward: outputs, or None");
  py::class_<CallCache, std::shared_ptr<CallCache>>(m, "CallCache")
      .def(py::init([](uint64_t log) {
             auto c = std::make_shared<CallCache>();
             c->log = reinterpret_cast<int64_t*>(log);
             return c;
           }), "a kernel's call cache (each hit writes its entry's tag to the int64 at address log, unless 0)")
      .def("__call__", &CallCache::call, "run the native step of this call signature: outputs, or None (a miss)")
      .def("add", &CallCache::add, "enter a step for calls with the signature of args: (args, step id, tag)");
}
