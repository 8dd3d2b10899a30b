#include "plexus/bench_workload.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>
#include <utility>

#include "plexus/core/device.hpp"
#include "plexus/tensor.h"

namespace plexus::cli::bench {

const char* direction_name(Direction d) noexcept {
  return d == Direction::forward ? "forward" : "backward";
}

DLDataType Problem::mapping() const noexcept {
  return activation.code == kDLFloat && activation.bits == 64 ? plx_dtype_f64() : plx_dtype_f32();
}

plx_mhc_problem Problem::c_problem() const noexcept {
  plx_mhc_problem p{};
  p.struct_size = sizeof(p);
  p.flags = transposed ? PLX_MHC_TRANSPOSED_H_RES : 0u;
  p.num_streams = streams;
  p.hidden_size = hidden;
  p.num_tokens = tokens;
  p.sinkhorn_iterations = iterations;
  p.eps = eps;
  return p;
}

const std::vector<std::string>& workload_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> list(std::begin(kMhcPrimitives), std::end(kMhcPrimitives));
    list.emplace_back("sublayer");
    return list;
  }();
  return names;
}

namespace {

// splitmix64: the same inputs on every platform and library, unlike std:: distributions.
double next_uniform(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

uint16_t to_bf16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest even (the values are finite)
  return static_cast<uint16_t>(bits >> 16);
}

using Access = Workload::Access;
constexpr Access R = Access::read, Wr = Access::write, Acc = Access::accumulate;
constexpr Direction Fwd = Direction::forward, Bwd = Direction::backward;

}  // namespace

// Adds tensors and calls to a workload; each primitive's calls are written once below and
// composed into the per-primitive workloads and the sublayer.
struct Workload::Builder {
  Workload& w;
  plx_mhc_problem pb;

  enum class Kind { activation, mapping };

  DLTensor* add(const std::string& name, std::vector<int64_t> shape, Kind kind, bool random, double lo,
                double hi) {
    const Problem& p = w.problem_;
    const DLDataType dtype = kind == Kind::activation ? p.activation : p.mapping();
    Tensor host(std::move(shape), dtype);
    if (random) {
      const auto n = static_cast<std::size_t>(host.numel());
      for (std::size_t i = 0; i < n; ++i) {
        const double v = lo + (hi - lo) * next_uniform(w.rng_state_);
        if (dtype.code == kDLBfloat)
          host.data<uint16_t>()[i] = to_bf16(static_cast<float>(v));
        else if (dtype.bits == 64)
          host.data<double>()[i] = v;
        else
          host.data<float>()[i] = static_cast<float>(v);
      }
    }
    Tensor placed = p.device.device_type == kDLCPU ? std::move(host) : host.to(p.device);
    const auto [it, inserted] = w.tensors_.emplace(name, std::move(placed));
    if (!inserted) throw std::logic_error("bench workload: tensor " + name + " added twice");
    return &(w.views_[name] = it->second.view());
  }
  DLTensor* in(const std::string& name, std::vector<int64_t> shape, Kind kind, double lo, double hi) {
    return add(name, std::move(shape), kind, true, lo, hi);
  }
  DLTensor* out(const std::string& name, std::vector<int64_t> shape, Kind kind) {
    return add(name, std::move(shape), kind, false, 0.0, 0.0);
  }
  DLTensor* v(const std::string& name) { return &w.views_.at(name); }

  void call(Direction d, std::string function, std::vector<Arg> args,
            std::function<void(const MhcBackend&)> run) {
    w.calls_[static_cast<int>(d)].push_back(Call{std::move(function), std::move(args), std::move(run)});
  }

  // ---- the eight calls, on tensors named by the caller ----
  void proj_rms_forward(const char* x, const char* phi, const char* p, const char* r) {
    call(Fwd, "proj_rms_forward", {{x, R}, {phi, R}, {p, Wr}, {r, Wr}},
         [pb = pb, a = plx_mhc_proj_rms_forward_args{sizeof(plx_mhc_proj_rms_forward_args), 0, v(x), v(phi),
                                                     v(p), v(r)}](const MhcBackend& be) {
           be.proj_rms_forward(pb, a, nullptr);
         });
  }
  void proj_rms_backward(const char* x, const char* phi, const char* dp, const char* dr, const char* dx,
                         const char* dphi) {
    call(Bwd, "proj_rms_backward", {{x, R}, {phi, R}, {dp, R}, {dr, R}, {dx, Acc}, {dphi, Acc}},
         [pb = pb, a = plx_mhc_proj_rms_backward_args{sizeof(plx_mhc_proj_rms_backward_args), 0, v(x), v(phi),
                                                      v(dp), v(dr), v(dx), v(dphi)}](const MhcBackend& be) {
           be.proj_rms_backward(pb, a, nullptr);
         });
  }
  void mappings_forward(const char* p, const char* r, const char* alpha, const char* b, const char* h_pre,
                        const char* h_post, const char* h_res) {
    call(Fwd, "mappings_forward",
         {{p, R}, {r, R}, {alpha, R}, {b, R}, {h_pre, Wr}, {h_post, Wr}, {h_res, Wr}},
         [pb = pb, a = plx_mhc_mappings_forward_args{sizeof(plx_mhc_mappings_forward_args), 0, v(p), v(r),
                                                     v(alpha), v(b), v(h_pre), v(h_post), v(h_res)}](
             const MhcBackend& be) { be.mappings_forward(pb, a, nullptr); });
  }
  void mappings_backward(const char* p, const char* r, const char* alpha, const char* b, const char* dh_pre,
                         const char* dh_post, const char* dh_res, const char* dp, const char* dr,
                         const char* dalpha, const char* db) {
    call(Bwd, "mappings_backward",
         {{p, R},
          {r, R},
          {alpha, R},
          {b, R},
          {dh_pre, R},
          {dh_post, R},
          {dh_res, R},
          {dp, Wr},
          {dr, Wr},
          {dalpha, Acc},
          {db, Acc}},
         [pb = pb, a = plx_mhc_mappings_backward_args{sizeof(plx_mhc_mappings_backward_args), 0, v(p), v(r),
                                                      v(alpha), v(b), v(dh_pre), v(dh_post), v(dh_res), v(dp),
                                                      v(dr), v(dalpha), v(db)}](const MhcBackend& be) {
           be.mappings_backward(pb, a, nullptr);
         });
  }
  void aggregate_forward(const char* x, const char* h_pre, const char* u) {
    call(Fwd, "aggregate_forward", {{x, R}, {h_pre, R}, {u, Wr}},
         [pb = pb, a = plx_mhc_aggregate_forward_args{sizeof(plx_mhc_aggregate_forward_args), 0, v(x),
                                                      v(h_pre), v(u)}](const MhcBackend& be) {
           be.aggregate_forward(pb, a, nullptr);
         });
  }
  void aggregate_backward(const char* x, const char* h_pre, const char* du, const char* dx,
                          const char* dh_pre) {
    call(Bwd, "aggregate_backward", {{x, R}, {h_pre, R}, {du, R}, {dx, Acc}, {dh_pre, Wr}},
         [pb = pb, a = plx_mhc_aggregate_backward_args{sizeof(plx_mhc_aggregate_backward_args), 0, v(x),
                                                       v(h_pre), v(du), v(dx), v(dh_pre)}](
             const MhcBackend& be) { be.aggregate_backward(pb, a, nullptr); });
  }
  void post_res_forward(const char* x, const char* h_res, const char* h_post, const char* f, const char* bias,
                        const char* y) {
    call(Fwd, "post_res_forward", {{x, R}, {h_res, R}, {h_post, R}, {f, R}, {bias, R}, {y, Wr}},
         [pb = pb, a = plx_mhc_post_res_forward_args{sizeof(plx_mhc_post_res_forward_args), 0, v(x), v(h_res),
                                                     v(h_post), v(f), v(bias), v(y)}](const MhcBackend& be) {
           be.post_res_forward(pb, a, nullptr);
         });
  }
  void post_res_backward(const char* x, const char* h_res, const char* h_post, const char* f,
                         const char* bias, const char* dy, const char* dx, const char* dh_res,
                         const char* dh_post, const char* df, const char* dbias) {
    call(Bwd, "post_res_backward",
         {{x, R},
          {h_res, R},
          {h_post, R},
          {f, R},
          {bias, R},
          {dy, R},
          {dx, Acc},
          {dh_res, Wr},
          {dh_post, Wr},
          {df, Wr},
          {dbias, Acc}},
         [pb = pb, a = plx_mhc_post_res_backward_args{
                       sizeof(plx_mhc_post_res_backward_args), 0, v(x), v(h_res), v(h_post), v(f), v(bias),
                       v(dy), v(dx), v(dh_res), v(dh_post), v(df), v(dbias)}](const MhcBackend& be) {
           be.post_res_backward(pb, a, nullptr);
         });
  }

  // ---- the tensors, with the ranges their random values come from ----
  // Inputs are uniform in ranges like those of a model's: x and upstream gradients in [-1, 1),
  // phi small (p of order 1), r near 1 / rms, alpha and b of order 1, H_pre in (0, 1), H_post
  // in (0, 2), H_res with rows summing to about 1.
  void x() { in("x", {T(), n(), C()}, Kind::activation, -1.0, 1.0); }
  void phi() { in("phi", {n() * C(), Wd()}, Kind::mapping, -0.05, 0.05); }
  void alpha_b() {
    in("alpha", {3}, Kind::mapping, 0.1, 1.0);
    in("b", {Wd()}, Kind::mapping, -1.0, 1.0);
  }
  void bias() { in("bias", {C()}, Kind::activation, -0.1, 0.1); }

  int64_t T() const { return w.problem_.tokens; }
  int64_t n() const { return w.problem_.streams; }
  int64_t C() const { return w.problem_.hidden; }
  int64_t Wd() const { return w.problem_.width(); }
};

Workload::Workload(std::string name, const Problem& problem, uint64_t seed)
    : name_(std::move(name)), problem_(problem), rng_state_(seed) {}

std::unique_ptr<Workload> Workload::make(const std::string& name, const Problem& problem, uint64_t seed) {
  std::unique_ptr<Workload> w(new Workload(name, problem, seed));
  Builder b{*w, problem.c_problem()};
  using K = Builder::Kind;
  const int64_t T = problem.tokens, n = problem.streams, C = problem.hidden, W = problem.width();
  const double K_iter = problem.iterations, nn = static_cast<double>(n * n), Td = static_cast<double>(T),
               Wd = static_cast<double>(W), nd = static_cast<double>(n);
  // proj_rms: the GEMM p = v·phi, 2·T·nC·W; backward dx += dp·phiᵀ and dphi += xᵀ·dp, twice that.
  const double proj_flops = 2.0 * Td * static_cast<double>(n * C) * static_cast<double>(W);
  // mappings, roughly (exp, division and sigmoid counted as one operation each): per token the
  // Sinkhorn iterations are 4K·n² (a sum and a division per entry for rows, then columns), its
  // exp and row max 3n², h = r·p·alpha + b 3W, the sigmoids 8n; backward recomputes all of it
  // and runs the chain rule back through every iteration (about twice the forward's work).
  const double map_fwd = Td * (4.0 * K_iter * nn + 3.0 * nn + 3.0 * Wd + 8.0 * nd);
  const double map_bwd = Td * (12.0 * K_iter * nn + 5.0 * nn + 11.0 * Wd + 16.0 * nd);

  if (name == "proj_rms") {
    b.x();
    b.phi();
    b.out("p", {T, W}, K::mapping);
    b.out("r", {T}, K::mapping);
    b.in("dp", {T, W}, K::mapping, -1.0, 1.0);
    b.in("dr", {T}, K::mapping, -1.0, 1.0);
    b.out("dx", {T, n, C}, K::activation);
    b.out("dphi", {n * C, W}, K::mapping);
    b.proj_rms_forward("x", "phi", "p", "r");
    b.proj_rms_backward("x", "phi", "dp", "dr", "dx", "dphi");
    w->flops_[0] = proj_flops;
    w->flops_[1] = 2.0 * proj_flops;
  } else if (name == "mappings") {
    b.in("p", {T, W}, K::mapping, -1.0, 1.0);
    b.in("r", {T}, K::mapping, 0.5, 2.0);
    b.alpha_b();
    b.out("h_pre", {T, n}, K::mapping);
    b.out("h_post", {T, n}, K::mapping);
    b.out("h_res", {T, n, n}, K::mapping);
    b.in("dh_pre", {T, n}, K::mapping, -1.0, 1.0);
    b.in("dh_post", {T, n}, K::mapping, -1.0, 1.0);
    b.in("dh_res", {T, n, n}, K::mapping, -1.0, 1.0);
    b.out("dp", {T, W}, K::mapping);
    b.out("dr", {T}, K::mapping);
    b.out("dalpha", {3}, K::mapping);
    b.out("db", {W}, K::mapping);
    b.mappings_forward("p", "r", "alpha", "b", "h_pre", "h_post", "h_res");
    b.mappings_backward("p", "r", "alpha", "b", "dh_pre", "dh_post", "dh_res", "dp", "dr", "dalpha", "db");
    w->flops_[0] = map_fwd;
    w->flops_[1] = map_bwd;
    w->flops_estimated_ = true;
  } else if (name == "aggregate") {
    b.x();
    b.in("h_pre", {T, n}, K::mapping, 0.0, 1.0);
    b.out("u", {T, C}, K::activation);
    b.in("du", {T, C}, K::activation, -1.0, 1.0);
    b.out("dx", {T, n, C}, K::activation);
    b.out("dh_pre", {T, n}, K::mapping);
    b.aggregate_forward("x", "h_pre", "u");
    b.aggregate_backward("x", "h_pre", "du", "dx", "dh_pre");
  } else if (name == "post_res") {
    b.x();
    b.in("h_res", {T, n, n}, K::mapping, 0.0, 2.0 / static_cast<double>(n));
    b.in("h_post", {T, n}, K::mapping, 0.0, 2.0);
    b.in("f", {T, C}, K::activation, -1.0, 1.0);
    b.bias();
    b.out("y", {T, n, C}, K::activation);
    b.in("dy", {T, n, C}, K::activation, -1.0, 1.0);
    b.out("dx", {T, n, C}, K::activation);
    b.out("dh_res", {T, n, n}, K::mapping);
    b.out("dh_post", {T, n}, K::mapping);
    b.out("df", {T, C}, K::activation);
    b.out("dbias", {C}, K::activation);
    b.post_res_forward("x", "h_res", "h_post", "f", "bias", "y");
    b.post_res_backward("x", "h_res", "h_post", "f", "bias", "dy", "dx", "dh_res", "dh_post", "df", "dbias");
  } else if (name == "sublayer") {
    // The connection around an identity F (f = u, so df is du): the engine's order of calls.
    b.x();
    b.phi();
    b.alpha_b();
    b.bias();
    b.out("p", {T, W}, K::mapping);
    b.out("r", {T}, K::mapping);
    b.out("h_pre", {T, n}, K::mapping);
    b.out("h_post", {T, n}, K::mapping);
    b.out("h_res", {T, n, n}, K::mapping);
    b.out("u", {T, C}, K::activation);
    b.out("y", {T, n, C}, K::activation);
    b.in("dy", {T, n, C}, K::activation, -1.0, 1.0);
    b.out("dx", {T, n, C}, K::activation);
    b.out("dh_res", {T, n, n}, K::mapping);
    b.out("dh_post", {T, n}, K::mapping);
    b.out("df", {T, C}, K::activation);
    b.out("dbias", {C}, K::activation);
    b.out("dh_pre", {T, n}, K::mapping);
    b.out("dp", {T, W}, K::mapping);
    b.out("dr", {T}, K::mapping);
    b.out("dalpha", {3}, K::mapping);
    b.out("db", {W}, K::mapping);
    b.out("dphi", {n * C, W}, K::mapping);
    b.proj_rms_forward("x", "phi", "p", "r");
    b.mappings_forward("p", "r", "alpha", "b", "h_pre", "h_post", "h_res");
    b.aggregate_forward("x", "h_pre", "u");
    b.post_res_forward("x", "h_res", "h_post", "u", "bias", "y");
    b.post_res_backward("x", "h_res", "h_post", "u", "bias", "dy", "dx", "dh_res", "dh_post", "df", "dbias");
    b.aggregate_backward("x", "h_pre", "df", "dx", "dh_pre");
    b.mappings_backward("p", "r", "alpha", "b", "dh_pre", "dh_post", "dh_res", "dp", "dr", "dalpha", "db");
    b.proj_rms_backward("x", "phi", "dp", "dr", "dx", "dphi");
    w->flops_[0] = proj_flops + map_fwd;
    w->flops_[1] = 2.0 * proj_flops + map_bwd;
    w->flops_estimated_ = true;
  } else {
    throw std::invalid_argument("bench workload: unknown primitive " + name);
  }
  return w;
}

void Workload::run(Direction d, const MhcBackend& backend) const {
  for (const Call& call : calls_[static_cast<int>(d)]) call.run(backend);
}

double Workload::bytes(Direction d) const {
  double total = 0.0;
  for (const Call& call : calls_[static_cast<int>(d)])
    for (const Arg& arg : call.args)
      total += static_cast<double>(tensors_.at(arg.tensor).bytes()) *
               (arg.access == Access::accumulate ? 2.0 : 1.0);
  return total;
}

double Workload::flops(Direction d) const {
  return flops_[static_cast<int>(d)];
}

std::vector<std::string> Workload::outputs(Direction d) const {
  std::vector<std::string> list;
  for (const Call& call : calls_[static_cast<int>(d)])
    for (const Arg& arg : call.args)
      if (arg.access != Access::read && std::find(list.begin(), list.end(), arg.tensor) == list.end())
        list.push_back(arg.tensor);
  return list;
}

void Workload::zero_outputs() {
  std::set<std::string> names;
  for (const auto& calls : calls_)
    for (const Call& call : calls)
      for (const Arg& arg : call.args)
        if (arg.access != Access::read) names.insert(arg.tensor);
  for (const std::string& name : names) tensors_.at(name).zero();
}

}  // namespace plexus::cli::bench
