// Parity of the mhc_fused fusion backend with the reference mhc_native (both the real built
// plugins), on the CPU: all eight functions of the "mhc" family on the same random inputs,
// every output and gradient compared.
//
// Cases cover the shapes the fused code treats specially: n in {1, 2, 4, 8} and 5, 11 (past the
// stack arrays, not a multiple of the four-row passes); odd C (37, 129:
// not a multiple of any vector width or tile); T in {1, 7, 333} (not a multiple of the Sinkhorn
// lane group, the projection's token block or the thread count) and T = 0; K in {1, 3, 20};
// eps = 1e-6 and eps = 0.5 (clamps carrying real mass); large logits (|h_res| ~ 1e3, one
// column 2000 above the others: a permutation in any precision), tiny column sums (clamp
// active), sums that underflow to zero, all-zero tokens of x (no gradient through the norm);
// the transposed switch; no bias; and subsets of the optional outputs (absent outputs are
// skipped, dbias without df uses a temporary).
//
// Semantics: accumulated outputs (the three dx, dphi, dalpha, db, dbias) start from the same
// non-zero values in both backends and must be added to; written outputs start as NaN in both
// and must be fully written (a NaN left anywhere fails).
//
// Error measure, per tensor: max |fused - native| / max |native|, the error relative to the
// tensor's own scale; below 1e-5 in float32 (both backends round differently only in the order
// of their sums) and 1e-12 in float64. Also: the fused results repeat bit for bit (its
// parameter-gradient sums are per thread, combined in a fixed order), and bad calls get the
// same status from both backends.
//
// Threads: every comparison runs with 1 and with 3 OpenMP threads (uneven per-thread ranges on
// any machine); the parallel paths are taken for the T = 333 cases.
#define BOOST_TEST_MODULE mhc_fused_parity
#include <dlfcn.h>
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/fusion.h"
#include "plexus/mhc.h"

namespace {

using Shape = std::vector<int64_t>;

const DLDataType kF32 = plx_dtype_f32();
const DLDataType kF64 = plx_dtype_f64();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Host tensors of float32 or float64 values, and their DLPack views.

class Tensor {
 public:
  Tensor() = default;
  Tensor(Shape shape, DLDataType dtype, double value = 0.0) : shape_(std::move(shape)), dtype_(dtype) {
    int64_t count = 1;
    for (int64_t d : shape_) count *= d;
    if (is_f64())
      f64_.assign(static_cast<std::size_t>(count), value);
    else
      f32_.assign(static_cast<std::size_t>(count), static_cast<float>(value));
  }

  bool is_f64() const { return plx_dtype_equal(dtype_, kF64); }
  std::size_t size() const { return is_f64() ? f64_.size() : f32_.size(); }
  const Shape& shape() const { return shape_; }
  double get(std::size_t i) const { return is_f64() ? f64_[i] : static_cast<double>(f32_[i]); }
  void set(std::size_t i, double v) {
    if (is_f64())
      f64_[i] = v;
    else
      f32_[i] = static_cast<float>(v);
  }
  bool same_bits(const Tensor& other) const {
    return size() == other.size() &&
           (is_f64() ? std::memcmp(f64_.data(), other.f64_.data(), size() * sizeof(double)) == 0
                     : std::memcmp(f32_.data(), other.f32_.data(), size() * sizeof(float)) == 0);
  }

  // The view handed to a plugin (valid while this tensor lives and is not resized).
  DLTensor* view() {
    dl_ = DLTensor{};
    dl_.device = device;
    dl_.ndim = static_cast<int32_t>(shape_.size());
    dl_.dtype = dtype_;
    dl_.shape = shape_.data();
    dl_.strides = strides.empty() ? nullptr : strides.data();
    dl_.data = is_f64() ? static_cast<void*>(f64_.data()) : static_cast<void*>(f32_.data());
    return &dl_;
  }

  DLDevice device{kDLCPU, 0};    // the refusal tests change it (the data stays on the host)
  std::vector<int64_t> strides;  // empty: compact row-major

 private:
  Shape shape_;
  DLDataType dtype_ = kF32;
  std::vector<float> f32_;
  std::vector<double> f64_;
  DLTensor dl_{};
};

// An absent optional tensor: a view with data NULL.
DLTensor* absent(Tensor& t) {
  DLTensor* v = t.view();
  v->data = nullptr;
  return v;
}

// ---------------------------------------------------------------------------------------------
// The two plugins and their backends.

plexus::PluginHost& host() {
  static plexus::PluginHost instance;
  static const bool loaded = [] {
    const std::filesystem::path dir = std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins";
    for (const char* file : {"libplexus_mhc_native.so", "libplexus_mhc_fused.so"}) {
      if (!std::filesystem::exists(dir / file))
        throw std::runtime_error(std::string("plugin not built: ") + (dir / file).string() + " is missing");
      instance.load(dir / file);
    }
    return true;
  }();
  (void)loaded;
  return instance;
}

// An entry point of the OpenMP runtime the plugins use. It is looked up rather than linked, as
// this test is not an OpenMP program: in the process's global scope (the core links it), else
// as the plugins' dependency, which the dynamic loader keeps once per process.
void* openmp_symbol(const char* name) {
  if (void* symbol = dlsym(RTLD_DEFAULT, name)) return symbol;
  void* library = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return nullptr;
  void* symbol = dlsym(library, name);
  dlclose(library);  // only drops this reference: the plugins keep it loaded (and pinned)
  return symbol;
}

// Sets the number of threads of the OpenMP regions the backends start from this thread; false
// when the runtime's entry points are not found (the default count is then used).
bool use_openmp_threads(int threads) {
  using SetThreads = void (*)(int);
  using GetThreads = int (*)();
  const auto set = reinterpret_cast<SetThreads>(openmp_symbol("omp_set_num_threads"));
  const auto get = reinterpret_cast<GetThreads>(openmp_symbol("omp_get_max_threads"));
  if (set == nullptr || get == nullptr) return false;
  set(threads);
  BOOST_TEST_REQUIRE(get() == threads, "OpenMP did not take " << threads << " threads");
  return true;
}

// What a call returned, and the plugin's message when it failed.
struct Outcome {
  plx_status status = PLX_OK;
  std::string message;
};

// One CPU instance of an mhc backend.
class Backend {
 public:
  explicit Backend(const std::string& name)
      : name_(name), component_(host().get(PLX_KIND_FUSION_BACKEND, name)) {
    backend_ = &component_.as<plx_fusion_backend_v1>();
    BOOST_TEST_REQUIRE(std::string(backend_->family) == PLX_MHC_FAMILY);
    plx_fusion_create_args args{};
    args.struct_size = sizeof(args);
    args.device = DLDevice{kDLCPU, 0};
    args.config = config_.get();
    plexus::check_call(component_, "create", backend_->create(&args, &instance_));
  }
  ~Backend() {
    if (instance_ != nullptr) backend_->destroy(instance_);
  }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& name() const { return name_; }
  const plx_mhc_v1& table() const { return *static_cast<const plx_mhc_v1*>(backend_->family_table); }
  bool runs_on(DLDeviceType type) const { return (backend_->device_mask & PLX_DEVICE_BIT(type)) != 0; }

  // Calls one function of the table; reports its status and message without throwing.
  template <class Args>
  Outcome call(plx_status (*fn)(void*, const plx_mhc_problem*, const Args*, plx_stream),
               const plx_mhc_problem* problem, const Args* args) const {
    plexus::HostServices::clear_last_error();
    Outcome o;
    o.status = fn(instance_, problem, args, nullptr);
    if (o.status != PLX_OK) o.message = plexus::HostServices::take_last_error();
    return o;
  }
  // Calls one function that must succeed.
  template <class Args>
  void run(plx_status (*fn)(void*, const plx_mhc_problem*, const Args*, plx_stream), const char* operation,
           const plx_mhc_problem& problem, const Args& args) const {
    plexus::check_call(component_, operation, fn(instance_, &problem, &args, nullptr));
  }
  // create() on another device.
  Outcome create_on(DLDevice device) {
    plx_fusion_create_args args{};
    args.struct_size = sizeof(args);
    args.device = device;
    args.config = config_.get();
    void* instance = nullptr;
    plexus::HostServices::clear_last_error();
    Outcome o;
    o.status = backend_->create(&args, &instance);
    if (o.status == PLX_OK)
      backend_->destroy(instance);
    else
      o.message = plexus::HostServices::take_last_error();
    return o;
  }

 private:
  std::string name_;
  const plexus::Component& component_;
  const plx_fusion_backend_v1* backend_ = nullptr;
  plexus::ConfigHandle config_{boost::json::object{}, "mhc.options"};
  void* instance_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Cases and their inputs.

// How the res logits (and x) are drawn; see the file comment.
enum class Draw { ordinary, large, tiny_sums, underflow, spread, column_dominated, zero_tokens };

// Which optional outputs are given: all, or every other one of the list in run_all (odd or even).
enum class Outputs { all, odd, even };

struct Case {
  std::string name;
  int64_t n = 4, C = 37, T = 7;
  int32_t K = 20;
  double eps = 1e-6;
  bool transposed = false;
  bool bias = true;
  Draw draw = Draw::ordinary;
  Outputs outputs = Outputs::all;

  int64_t W() const { return n * n + 2 * n; }
  plx_mhc_problem problem() const {
    plx_mhc_problem p{};
    p.struct_size = sizeof(p);
    p.flags = transposed ? PLX_MHC_TRANSPOSED_H_RES : 0u;
    p.num_streams = n;
    p.hidden_size = C;
    p.num_tokens = T;
    p.sinkhorn_iterations = K;
    p.eps = eps;
    return p;
  }
};

using Tensors = std::map<std::string, Tensor>;

Tensor random(const Shape& shape, DLDataType dtype, std::mt19937_64& rng, double scale = 1.0,
              double offset = 0.0) {
  Tensor t(shape, dtype);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::size_t i = 0; i < t.size(); ++i) t.set(i, offset + scale * normal(rng));
  return t;
}

// Every input of every primitive (upstream gradients named g_*), plus the starting values of the
// accumulated outputs (named init.*).
Tensors make_inputs(const Case& c, DLDataType dt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t n = c.n, C = c.C, T = c.T, W = c.W();
  Tensors in;
  in["x"] = random({T, n, C}, dt, rng);
  if (c.draw == Draw::zero_tokens)  // every third token all zeros: r = 1/eps, no norm gradient
    for (int64_t t = 0; t < T; t += 3)
      for (int64_t k = 0; k < n * C; ++k) in["x"].set(static_cast<std::size_t>(t * n * C + k), 0.0);
  in["phi"] = random({n * C, W}, dt, rng, 1.0 / std::sqrt(static_cast<double>(n * C)));
  in["g_p"] = random({T, W}, dt, rng);
  in["g_r"] = random({T}, dt, rng);

  in["p"] = random({T, W}, dt, rng);
  in["r"] = random({T}, dt, rng, 0.3, 1.0);
  in["alpha"] = Tensor({3}, dt);
  in["alpha"].set(0, 0.8);
  in["alpha"].set(1, -0.6);
  in["alpha"].set(2, 1.3);
  in["b"] = random({W}, dt, rng, 0.5);
  std::normal_distribution<double> noise(0.0, 100.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const auto k = static_cast<std::size_t>(2 * n + i * n + j);
      const double b = in["b"].get(k);
      switch (c.draw) {
        case Draw::ordinary:
        case Draw::zero_tokens:
          break;
        case Draw::large:  // row i peaks at column i+1 by ~2000: M is that permutation
          in["b"].set(k, b + (j == (i + 1) % n ? 1000.0 : -1000.0) + noise(rng));
          break;
        case Draw::tiny_sums:  // column 0 ~1e-11 of the others: its sums clamp to eps
          in["b"].set(k, b - (j == 0 ? 25.0 : 0.0));
          break;
        case Draw::underflow:  // column 0 below exp's range: its entries (and sums) are exactly 0
          in["b"].set(k, b - (j == 0 ? 800.0 : 0.0));
          break;
        case Draw::spread:  // eps = 0.5: column clamps carry mass
          in["b"].set(k, 4.0 * b);
          break;
        case Draw::column_dominated:  // eps = 0.5: columns > 0 clamp, then rows too
          in["b"].set(k, j == 0 ? 4.0 : 0.2 * b);
          for (int64_t t = 0; t < T; ++t) {
            const auto at = static_cast<std::size_t>(t * W) + k;
            in["p"].set(at, 0.2 * in["p"].get(at));
          }
          break;
      }
    }
  in["g_h_pre"] = random({T, n}, dt, rng);
  in["g_h_post"] = random({T, n}, dt, rng);
  in["g_h_res"] = random({T, n, n}, dt, rng);

  in["h_pre"] = random({T, n}, dt, rng, 0.5, 0.5);
  in["g_u"] = random({T, C}, dt, rng);

  in["h_res"] = random({T, n, n}, dt, rng, 0.5);
  in["h_post"] = random({T, n}, dt, rng, 0.5, 1.0);
  in["f"] = random({T, C}, dt, rng);
  in["bias"] = random({C}, dt, rng, 0.3);
  in["g_y"] = random({T, n, C}, dt, rng);

  for (const char* dx : {"init.proj_rms.dx", "init.aggregate.dx", "init.post_res.dx"})
    in[dx] = random({T, n, C}, dt, rng, 0.5);
  in["init.dphi"] = random({n * C, W}, dt, rng, 0.5);
  in["init.dalpha"] = random({3}, dt, rng, 0.5);
  in["init.db"] = random({W}, dt, rng, 0.5);
  in["init.dbias"] = random({C}, dt, rng, 0.5);
  return in;
}

// Runs all eight functions of `be` on the inputs; returns every output that was asked for, by
// name. Written outputs start as NaN, accumulated ones at their init.* values.
Tensors run_all(const Backend& be, const Case& c, Tensors& in, DLDataType dt) {
  const int64_t n = c.n, C = c.C, T = c.T, W = c.W();
  const plx_mhc_problem pb = c.problem();
  Tensors out;
  for (const auto& [name, shape] : std::map<std::string, Shape>{{"p", {T, W}},
                                                                {"r", {T}},
                                                                {"h_pre", {T, n}},
                                                                {"h_post", {T, n}},
                                                                {"h_res", {T, n, n}},
                                                                {"dp", {T, W}},
                                                                {"dr", {T}},
                                                                {"u", {T, C}},
                                                                {"dh_pre", {T, n}},
                                                                {"y", {T, n, C}},
                                                                {"dh_res", {T, n, n}},
                                                                {"dh_post", {T, n}},
                                                                {"df", {T, C}}})
    out[name] = Tensor(shape, dt, kNaN);
  for (const char* name : {"proj_rms.dx", "aggregate.dx", "post_res.dx", "dphi", "dalpha", "db", "dbias"})
    out[name] = in[std::string("init.") + name];

  // The optional outputs in a fixed order; Outputs::odd keeps the odd positions, even the even.
  const std::vector<std::string> optional = {"proj_rms.dx", "dphi",         "dp",     "dr",          "dalpha",
                                             "db",          "aggregate.dx", "dh_pre", "post_res.dx", "dh_res",
                                             "dh_post",     "df",           "dbias"};
  for (std::size_t i = 0; i < optional.size(); ++i) {
    const bool keep = c.outputs == Outputs::all || (c.outputs == Outputs::odd) == (i % 2 == 1);
    if (!keep) out.erase(optional[i]);
  }
  Tensor missing({1}, dt);
  const auto opt = [&](const char* name) -> DLTensor* {
    return out.count(name) ? out[name].view() : absent(missing);
  };
  DLTensor* bias = c.bias ? in["bias"].view() : absent(missing);

  be.run(be.table().proj_rms_forward, "proj_rms_forward", pb,
         plx_mhc_proj_rms_forward_args{sizeof(plx_mhc_proj_rms_forward_args), 0, in["x"].view(),
                                       in["phi"].view(), out["p"].view(), out["r"].view()});
  be.run(be.table().proj_rms_backward, "proj_rms_backward", pb,
         plx_mhc_proj_rms_backward_args{sizeof(plx_mhc_proj_rms_backward_args), 0, in["x"].view(),
                                        in["phi"].view(), in["g_p"].view(), in["g_r"].view(),
                                        opt("proj_rms.dx"), opt("dphi")});
  be.run(be.table().mappings_forward, "mappings_forward", pb,
         plx_mhc_mappings_forward_args{sizeof(plx_mhc_mappings_forward_args), 0, in["p"].view(),
                                       in["r"].view(), in["alpha"].view(), in["b"].view(),
                                       out["h_pre"].view(), out["h_post"].view(), out["h_res"].view()});
  be.run(be.table().mappings_backward, "mappings_backward", pb,
         plx_mhc_mappings_backward_args{sizeof(plx_mhc_mappings_backward_args), 0, in["p"].view(),
                                        in["r"].view(), in["alpha"].view(), in["b"].view(),
                                        in["g_h_pre"].view(), in["g_h_post"].view(), in["g_h_res"].view(),
                                        opt("dp"), opt("dr"), opt("dalpha"), opt("db")});
  be.run(be.table().aggregate_forward, "aggregate_forward", pb,
         plx_mhc_aggregate_forward_args{sizeof(plx_mhc_aggregate_forward_args), 0, in["x"].view(),
                                        in["h_pre"].view(), out["u"].view()});
  be.run(be.table().aggregate_backward, "aggregate_backward", pb,
         plx_mhc_aggregate_backward_args{sizeof(plx_mhc_aggregate_backward_args), 0, in["x"].view(),
                                         in["h_pre"].view(), in["g_u"].view(), opt("aggregate.dx"),
                                         opt("dh_pre")});
  be.run(be.table().post_res_forward, "post_res_forward", pb,
         plx_mhc_post_res_forward_args{sizeof(plx_mhc_post_res_forward_args), 0, in["x"].view(),
                                       in["h_res"].view(), in["h_post"].view(), in["f"].view(), bias,
                                       out["y"].view()});
  be.run(be.table().post_res_backward, "post_res_backward", pb,
         plx_mhc_post_res_backward_args{sizeof(plx_mhc_post_res_backward_args), 0, in["x"].view(),
                                        in["h_res"].view(), in["h_post"].view(), in["f"].view(), bias,
                                        in["g_y"].view(), opt("post_res.dx"), opt("dh_res"), opt("dh_post"),
                                        opt("df"), opt("dbias")});
  return out;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  const auto add = [&](Case c, const std::string& name) {
    c.name = name;
    all.push_back(c);
  };
  // Every shape at the defaults (K = 20, eps = 1e-6, ordinary logits, bias).
  for (int64_t n : {1, 2, 4, 8})
    for (int64_t C : {37, 129})
      for (int64_t T : {1, 7, 333}) {
        Case c;
        c.n = n, c.C = C, c.T = T;
        add(c, 'n' + std::to_string(n) + "_C" + std::to_string(C) + "_T" + std::to_string(T));
      }
  // n past the stack arrays (n > 8: heap) and not a multiple of the four-row passes.
  for (int64_t n : {5, 11}) {
    Case c;
    c.n = n, c.C = 129, c.T = n == 5 ? 333 : 40, c.K = 5;
    add(c, 'n' + std::to_string(n) + "_C129_K5");
  }
  for (int32_t K : {1, 3}) {
    Case c;
    c.T = 333, c.K = K;
    add(c, "n4_K" + std::to_string(K));
  }
  // Logits that stress Sinkhorn, at several n.
  for (int64_t n : {2, 4, 8})
    for (Draw d : {Draw::large, Draw::tiny_sums, Draw::underflow}) {
      Case c;
      c.n = n, c.T = 333, c.draw = d;
      // A column of exact zeros clamps in every iteration, and the chain rule multiplies its
      // gradient by 1/eps each time: past K = 6 that overflows float32 (in both backends alike).
      if (d == Draw::underflow) c.K = 3;
      add(c, 'n' + std::to_string(n) +
                 (d == Draw::large       ? "_large"
                  : d == Draw::tiny_sums ? "_tiny_sums"
                                         : "_underflow"));
    }
  for (Draw d : {Draw::spread, Draw::column_dominated}) {
    const std::string what = d == Draw::spread ? "_spread" : "_column_dominated";
    Case c;
    c.eps = 0.5, c.draw = d, c.K = 3, c.T = 333;
    add(c, "n4_eps0.5" + what);
    c.n = 8, c.K = 20, c.T = 7;
    add(c, "n8_eps0.5_K20" + what);
  }
  {
    Case c;
    c.draw = Draw::zero_tokens, c.T = 333, c.C = 129;
    add(c, "n4_zero_tokens");
  }
  {
    Case c;
    c.transposed = true, c.T = 333, c.C = 129;
    add(c, "n4_transposed");
    c.n = 8, c.C = 37, c.T = 7;
    add(c, "n8_transposed");
  }
  {
    Case c;
    c.bias = false, c.n = 2, c.C = 129, c.T = 333;
    add(c, "n2_no_bias");
    c.n = 4, c.C = 37, c.T = 7, c.outputs = Outputs::odd;
    add(c, "n4_no_bias_odd_outputs");
  }
  for (Outputs o : {Outputs::odd, Outputs::even}) {
    Case c;
    c.C = 129, c.T = 333, c.outputs = o;
    add(c, std::string("n4_outputs_") + (o == Outputs::odd ? "odd" : "even"));
  }
  {
    Case c;
    c.T = 0;
    add(c, "n4_T0");
  }
  return all;
}

// fused against native for every output of one case; returns the worst scaled error.
double compare(const std::string& key, Tensors& fused, Tensors& native, double tolerance) {
  double worst = 0;
  BOOST_TEST_REQUIRE(fused.size() == native.size(), key);
  for (auto& [name, mine] : fused) {
    const Tensor& ref = native.at(name);
    BOOST_TEST_REQUIRE(mine.size() == ref.size(), key << "/" << name);
    double diff = 0, scale = 1e-30;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      BOOST_TEST_REQUIRE(std::isfinite(ref.get(i)), key << "/" << name << "[" << i << "]: mhc_native gave "
                                                        << ref.get(i) << " (a bad test case)");
      if (!std::isfinite(mine.get(i))) {  // NaN: an element left unwritten
        BOOST_TEST(false, key << "/" << name << "[" << i << "] is " << mine.get(i)
                              << " (mhc_native: " << ref.get(i) << ")");
        return 1.0;
      }
      diff = std::max(diff, std::abs(mine.get(i) - ref.get(i)));
      scale = std::max(scale, std::abs(ref.get(i)));
    }
    const double error = diff / scale;
    worst = std::max(worst, error);
    BOOST_TEST(error <= tolerance,
               key << "/" << name << ": scaled error " << error << " (largest |native| " << scale << ")");
  }
  return worst;
}

// All cases with `threads` OpenMP threads (0: the runtime's default).
void parity(DLDataType dt, double tolerance, int threads) {
  const Backend native("mhc_native"), fused("mhc_fused");
  double worst = 0;
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    Tensors in = make_inputs(c, dt, seed++);
    Tensors ours = run_all(fused, c, in, dt);
    Tensors ref = run_all(native, c, in, dt);
    worst = std::max(worst, compare(c.name, ours, ref, tolerance));
    // Bit for bit the same on a second run (same thread count).
    Tensors again = run_all(fused, c, in, dt);
    for (auto& [name, t] : ours)
      BOOST_TEST(t.same_bits(again.at(name)), c.name << "/" << name << " differs on a rerun");
  }
  BOOST_TEST_MESSAGE(
      cases().size() << " cases, " << (plx_dtype_equal(dt, kF64) ? "float64" : "float32") << ", " << threads
                     << " threads: worst scaled error of mhc_fused against mhc_native " << worst);
}

}  // namespace

// Runs `check` with 1 and with 3 threads, or once with the default count when the OpenMP
// runtime cannot be reached from here.
void with_threads(const std::function<void(int)>& check) {
  host();  // the plugins load the OpenMP runtime
  for (int threads : {1, 3}) {
    if (!use_openmp_threads(threads)) {
      BOOST_TEST_MESSAGE("the OpenMP runtime's entry points are not found: default thread count only");
      check(0);
      return;
    }
    check(threads);
  }
}

BOOST_AUTO_TEST_CASE(float32_matches_mhc_native) {
  with_threads([](int threads) { parity(kF32, 1e-5, threads); });
}

BOOST_AUTO_TEST_CASE(float64_matches_mhc_native) {
  with_threads([](int threads) { parity(kF64, 1e-12, threads); });
}

// ---------------------------------------------------------------------------------------------
// Bad calls: the same status from both backends (their checks come from the same SDK helper;
// the device and dtype refusals are each backend's own).

namespace {

// The tensors of one call of each function, valid for the case {n 2, C 5, T 3}; a refusal test
// breaks one thing and calls.
struct Call {
  Case c;
  DLDataType dt;
  Tensors t;
  explicit Call(DLDataType dtype = kF32) : dt(dtype) {
    c.n = 2, c.C = 5, c.T = 3;
    t = make_inputs(c, dt, 99);
    const int64_t n = c.n, C = c.C, T = c.T, W = c.W();
    for (const auto& [name, shape] : std::map<std::string, Shape>{{"p_out", {T, W}},
                                                                  {"r_out", {T}},
                                                                  {"dx", {T, n, C}},
                                                                  {"dphi", {n * C, W}},
                                                                  {"dp", {T, W}},
                                                                  {"dr", {T}},
                                                                  {"dalpha", {3}},
                                                                  {"db", {W}},
                                                                  {"u", {T, C}},
                                                                  {"dh_pre", {T, n}},
                                                                  {"y", {T, n, C}},
                                                                  {"dh_res", {T, n, n}},
                                                                  {"dh_post", {T, n}},
                                                                  {"df", {T, C}},
                                                                  {"dbias", {C}}})
      t[name] = Tensor(shape, dt);
  }
  plx_mhc_problem problem() const { return c.problem(); }
};

using Refusal = std::function<Outcome(const Backend&)>;

void same_status(const std::string& what, const Refusal& call, plx_status expected) {
  const Backend native("mhc_native"), fused("mhc_fused");
  const Outcome a = call(native), b = call(fused);
  BOOST_TEST_MESSAGE(what << ": mhc_native " << plx_status_name(a.status) << " (" << a.message
                          << "); mhc_fused " << plx_status_name(b.status) << " (" << b.message << ")");
  BOOST_TEST(a.status == expected, what << ": mhc_native gave " << plx_status_name(a.status));
  BOOST_TEST(b.status == a.status, what << ": mhc_fused gave " << plx_status_name(b.status) << ", mhc_native "
                                        << plx_status_name(a.status));
}

Outcome proj_rms_forward(const Backend& be, Call& k, const plx_mhc_problem* pb) {
  const plx_mhc_proj_rms_forward_args a{
      sizeof(a), 0, k.t["x"].view(), k.t["phi"].view(), k.t["p_out"].view(), k.t["r_out"].view()};
  return be.call(be.table().proj_rms_forward, pb, &a);
}

}  // namespace

BOOST_AUTO_TEST_CASE(bad_calls_get_the_same_status) {
  const auto projection = [](std::function<void(Call&, plx_mhc_problem&)> breaks) -> Refusal {
    return [breaks](const Backend& be) {
      Call k;
      plx_mhc_problem pb = k.problem();
      breaks(k, pb);
      return proj_rms_forward(be, k, &pb);
    };
  };
  same_status("valid call", projection([](Call&, plx_mhc_problem&) {}), PLX_OK);
  same_status("x of the wrong shape", projection([](Call& k, plx_mhc_problem&) {
                k.t["x"] = Tensor({3, 2, 6}, kF32);
              }),
              PLX_ERR_INVALID_ARGUMENT);
  same_status("phi float64 with float32 x", projection([](Call& k, plx_mhc_problem&) {
                k.t["phi"] = Tensor({10, 8}, kF64);
              }),
              PLX_ERR_INVALID_ARGUMENT);
  same_status("r on another device", projection([](Call& k, plx_mhc_problem&) {
                k.t["r_out"].device = DLDevice{kDLCUDA, 1};
              }),
              PLX_ERR_INVALID_ARGUMENT);
  same_status("non-contiguous x", projection([](Call& k, plx_mhc_problem&) {
                k.t["x"].strides = {1, 3, 6};
              }),
              PLX_ERR_INVALID_ARGUMENT);
  same_status("K = 0", projection([](Call&, plx_mhc_problem& pb) { pb.sinkhorn_iterations = 0; }),
              PLX_ERR_INVALID_ARGUMENT);
  same_status("eps = 0", projection([](Call&, plx_mhc_problem& pb) { pb.eps = 0; }),
              PLX_ERR_INVALID_ARGUMENT);
  same_status("eps below float32's normals", projection([](Call&, plx_mhc_problem& pb) { pb.eps = 1e-40; }),
              PLX_ERR_INVALID_ARGUMENT);
  same_status("n = 0", projection([](Call&, plx_mhc_problem& pb) { pb.num_streams = 0; }),
              PLX_ERR_INVALID_ARGUMENT);
  same_status("unknown flag", projection([](Call&, plx_mhc_problem& pb) { pb.flags = 1u << 4; }),
              PLX_ERR_UNSUPPORTED);
  same_status("small struct_size", projection([](Call&, plx_mhc_problem& pb) { pb.struct_size = 8; }),
              PLX_ERR_INVALID_ARGUMENT);
  same_status(
      "NULL problem",
      [](const Backend& be) {
        Call k;
        return proj_rms_forward(be, k, nullptr);
      },
      PLX_ERR_INVALID_ARGUMENT);
  same_status(
      "NULL args",
      [](const Backend& be) {
        const plx_mhc_problem pb = Call().problem();
        return be.call<plx_mhc_proj_rms_forward_args>(be.table().proj_rms_forward, &pb, nullptr);
      },
      PLX_ERR_INVALID_ARGUMENT);
  same_status(
      "float16 activations",
      [](const Backend& be) {
        Call k;
        const plx_mhc_problem pb = k.problem();
        plx_mhc_proj_rms_forward_args a{
            sizeof(a), 0, k.t["x"].view(), k.t["phi"].view(), k.t["p_out"].view(), k.t["r_out"].view()};
        const_cast<DLTensor*>(a.x)->dtype = plx_dtype(static_cast<uint8_t>(kDLFloat), 16);
        return be.call(be.table().proj_rms_forward, &pb, &a);
      },
      PLX_ERR_INVALID_ARGUMENT);
  same_status(
      "bfloat16 activations (valid for the family, not run on the CPU)",
      [](const Backend& be) {
        Call k;
        const plx_mhc_problem pb = k.problem();
        plx_mhc_aggregate_forward_args a{sizeof(a), 0, k.t["x"].view(), k.t["h_pre"].view(), k.t["u"].view()};
        const_cast<DLTensor*>(a.x)->dtype = plx_dtype_bf16();
        const_cast<DLTensor*>(a.u)->dtype = plx_dtype_bf16();
        return be.call(be.table().aggregate_forward, &pb, &a);
      },
      PLX_ERR_UNSUPPORTED);
  same_status(
      "mappings: h_res of the wrong shape",
      [](const Backend& be) {
        Call k;
        const plx_mhc_problem pb = k.problem();
        k.t["h_res"] = Tensor({3, 2, 3}, kF32);
        const plx_mhc_mappings_forward_args a{sizeof(a),           0,
                                              k.t["p"].view(),     k.t["r"].view(),
                                              k.t["alpha"].view(), k.t["b"].view(),
                                              k.t["h_pre"].view(), k.t["h_post"].view(),
                                              k.t["h_res"].view()};
        return be.call(be.table().mappings_forward, &pb, &a);
      },
      PLX_ERR_INVALID_ARGUMENT);
  same_status(
      "mappings backward: db float64 in a float32 call",
      [](const Backend& be) {
        Call k;
        const plx_mhc_problem pb = k.problem();
        k.t["db"] = Tensor({8}, kF64);
        const plx_mhc_mappings_backward_args a{sizeof(a),
                                               0,
                                               k.t["p"].view(),
                                               k.t["r"].view(),
                                               k.t["alpha"].view(),
                                               k.t["b"].view(),
                                               k.t["g_h_pre"].view(),
                                               k.t["g_h_post"].view(),
                                               k.t["g_h_res"].view(),
                                               k.t["dp"].view(),
                                               k.t["dr"].view(),
                                               k.t["dalpha"].view(),
                                               k.t["db"].view()};
        return be.call(be.table().mappings_backward, &pb, &a);
      },
      PLX_ERR_INVALID_ARGUMENT);
  same_status(
      "aggregate backward: du missing",
      [](const Backend& be) {
        Call k;
        const plx_mhc_problem pb = k.problem();
        const plx_mhc_aggregate_backward_args a{sizeof(a),           0,       k.t["x"].view(),
                                                k.t["h_pre"].view(), nullptr, k.t["dx"].view(),
                                                k.t["dh_pre"].view()};
        return be.call(be.table().aggregate_backward, &pb, &a);
      },
      PLX_ERR_INVALID_ARGUMENT);
  same_status(
      "post_res backward: dbias of the wrong shape",
      [](const Backend& be) {
        Call k;
        const plx_mhc_problem pb = k.problem();
        k.t["dbias"] = Tensor({6}, kF32);
        const plx_mhc_post_res_backward_args a{sizeof(a),
                                               0,
                                               k.t["x"].view(),
                                               k.t["h_res"].view(),
                                               k.t["h_post"].view(),
                                               k.t["f"].view(),
                                               k.t["bias"].view(),
                                               k.t["g_y"].view(),
                                               k.t["dx"].view(),
                                               k.t["dh_res"].view(),
                                               k.t["dh_post"].view(),
                                               k.t["df"].view(),
                                               k.t["dbias"].view()};
        return be.call(be.table().post_res_backward, &pb, &a);
      },
      PLX_ERR_INVALID_ARGUMENT);
  same_status(
      "post_res forward: f on another device",
      [](const Backend& be) {
        Call k;
        const plx_mhc_problem pb = k.problem();
        k.t["f"].device = DLDevice{kDLCUDA, 0};
        const plx_mhc_post_res_forward_args a{sizeof(a),
                                              0,
                                              k.t["x"].view(),
                                              k.t["h_res"].view(),
                                              k.t["h_post"].view(),
                                              k.t["f"].view(),
                                              k.t["bias"].view(),
                                              k.t["y"].view()};
        return be.call(be.table().post_res_forward, &pb, &a);
      },
      PLX_ERR_INVALID_ARGUMENT);
  same_status(
      "float64 call with a float32 h_pre",
      [](const Backend& be) {
        Call k(kF64);
        const plx_mhc_problem pb = k.problem();
        k.t["h_pre"] = Tensor({3, 2}, kF32);
        const plx_mhc_aggregate_forward_args a{sizeof(a), 0, k.t["x"].view(), k.t["h_pre"].view(),
                                               k.t["u"].view()};
        return be.call(be.table().aggregate_forward, &pb, &a);
      },
      PLX_ERR_INVALID_ARGUMENT);
}

// A call whose tensors are all on a GPU, and an instance for a GPU. In a build without CUDA,
// mhc_fused runs on the CPU only and refuses both as unsupported, as mhc_native does. In a build
// with CUDA both declare CUDA: a CPU instance given GPU tensors refuses them as an invalid argument
// (one instance per device), with mhc_native's status, and an instance for a GPU that is not
// there is unsupported (tests/gpu/test_mhc_fused_cuda.cpp runs the CUDA device on a GPU).
BOOST_AUTO_TEST_CASE(gpu_devices_follow_the_build) {
  Backend native("mhc_native"), fused("mhc_fused");
  const bool cpu_only = !fused.runs_on(kDLCUDA);
  BOOST_TEST(native.runs_on(kDLCUDA) == !cpu_only);
  BOOST_TEST(fused.runs_on(kDLCPU));

  const auto on_gpu = [](const Backend& be) {
    Call k;
    const plx_mhc_problem pb = k.problem();
    for (const char* name : {"x", "h_res", "h_post", "f", "bias", "y"})
      k.t[name].device = DLDevice{kDLCUDA, 0};
    const plx_mhc_post_res_forward_args a{sizeof(a),
                                          0,
                                          k.t["x"].view(),
                                          k.t["h_res"].view(),
                                          k.t["h_post"].view(),
                                          k.t["f"].view(),
                                          k.t["bias"].view(),
                                          k.t["y"].view()};
    return be.call(be.table().post_res_forward, &pb, &a);
  };
  const Outcome f = on_gpu(fused);
  BOOST_TEST_MESSAGE("tensors on cuda:0: mhc_fused " << plx_status_name(f.status) << " (" << f.message
                                                     << ")");
  BOOST_TEST(f.status == on_gpu(native).status);
  if (cpu_only) {
    BOOST_TEST(f.status == PLX_ERR_UNSUPPORTED);
    BOOST_TEST(f.message.find("CPU only") != std::string::npos, f.message);
  } else {
    BOOST_TEST(f.status == PLX_ERR_INVALID_ARGUMENT);
    BOOST_TEST(f.message.find("cuda:0") != std::string::npos, f.message);
  }
  // Unsupported without CUDA; with CUDA, unsupported only where cuda:0 is not there.
  const Outcome created = fused.create_on(DLDevice{kDLCUDA, 0});
  BOOST_TEST_MESSAGE("an instance on cuda:0: mhc_fused " << plx_status_name(created.status) << " ("
                                                         << created.message << ")");
  BOOST_TEST((created.status == PLX_ERR_UNSUPPORTED || (!cpu_only && created.status == PLX_OK)),
             created.message);
  BOOST_TEST(native.create_on(DLDevice{kDLCUDA, 0}).status == created.status);
}
