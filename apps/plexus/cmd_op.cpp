// `plexus op`: runs one primitive of an "mhc" fusion backend, forward and (when the upstream
// gradients are given) backward, on tensors read from a safetensors file, and writes every
// output and gradient to a safetensors file. A backend author checks a backend against the
// reference with it; the tensor names are those of the PyTorch reference
// (tests/reference/mhc_reference.py), so the two files compare name by name.
#include <chrono>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plexus/cli.hpp"
#include "plexus/commands.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/mhc_backend.hpp"
#include "plexus/core/plugin_host.hpp"

namespace plexus::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: plexus op --backend NAME --primitive P --input IN --output OUT [options]

Runs primitive P of the "mhc" fusion backend NAME (docs/mhc-backend.md) on the tensors of the
safetensors file IN, forward, then backward when every upstream gradient g_* is in IN, and writes
the outputs and gradients to OUT (replaced atomically). Tensors are float32 or float64 (the
mapping tensors take the dtype of x, or of p for mappings). With --prefix, every name is read
and written as PREFIX + name, so one file can hold several cases.

tensors read (g_*: upstream gradients, optional as a group) and written, per primitive:
  proj_rms   x [T,n,C], phi [n*C,W]            g_p [T,W], g_r [T]
             -> p [T,W], r [T]                  dx, dphi
  mappings   p [T,W], r [T], alpha [3], b [W]  g_h_pre [T,n], g_h_post [T,n], g_h_res [T,n,n]
             -> h_pre, h_post, h_res            dp, dr, dalpha, db
  aggregate  x [T,n,C], h_pre [T,n]            g_u [T,C]
             -> u [T,C]                         dx, dh_pre
  post_res   x, h_res [T,n,n], h_post [T,n], f [T,C], bias [C] (optional)   g_y [T,n,C]
             -> y [T,n,C]                       dx, dh_res, dh_post, df, dbias (with bias)
W = n*n + 2n. T, n and C come from the shapes (for mappings n from W, and C is not used).
Gradients are the gradients of sum(g_out * out) over the outputs; the ones the family
accumulates start from zero here, so every written gradient is the gradient itself.
)";

namespace ck = checkpoint;

struct Inputs {
  ck::SafetensorsFile file;
  std::string prefix;

  bool has(const std::string& name) const { return file.contains(prefix + name); }
  Tensor read(const std::string& name) const {
    if (!has(name))
      throw std::runtime_error(file.path().string() + ": no tensor \"" + prefix + name +
                               "\" (plexus op --help lists the names)");
    const ck::TensorView view = file.tensor(prefix + name);
    DLDataType dtype{};
    if (view.dtype == ck::DType::f32)
      dtype = plx_dtype_f32();
    else if (view.dtype == ck::DType::f64)
      dtype = plx_dtype_f64();
    else
      throw std::runtime_error(file.path().string() + ": tensor \"" + prefix + name + "\" is " +
                               std::string(ck::to_string(view.dtype)) + "; plexus op takes F32 or F64");
    Tensor t(std::vector<int64_t>(view.shape.begin(), view.shape.end()), dtype);
    std::memcpy(t.raw(), view.bytes.data(), view.bytes.size());
    return t;
  }
};

// The outputs and gradients, written under their names in one file at the end. A deque: the
// runners keep the reference add() returns while adding more, which a vector's growth would leave
// dangling.
struct Outputs {
  std::deque<std::pair<std::string, Tensor>> tensors;
  Tensor& add(const std::string& name, std::vector<int64_t> shape, DLDataType dtype) {
    tensors.emplace_back(name, Tensor(std::move(shape), dtype));
    return tensors.back().second;
  }
};

void expect_rank(const Tensor& t, std::size_t rank, const std::string& name, const Inputs& in) {
  if (t.shape().size() != rank)
    throw std::runtime_error(in.file.path().string() + ": tensor \"" + in.prefix + name + "\" has shape " +
                             shape_string(t.shape()) + "; plexus op expects " + std::to_string(rank) +
                             " dimensions (plexus op --help)");
}

bool all_present(const Inputs& in, std::initializer_list<const char*> names) {
  bool all = true, any = false;
  for (const char* n : names) {
    all = all && in.has(n);
    any = any || in.has(n);
  }
  if (any && !all)
    throw std::runtime_error(in.file.path().string() +
                             ": some upstream gradients are given and some are not; give all of " +
                             [&] {
                               std::string list;
                               for (const char* n : names) list += (list.empty() ? "" : ", ") + in.prefix + n;
                               return list;
                             }() +
                             " for a backward, or none for a forward only");
  return all;
}

plx_mhc_problem make_problem(int64_t tokens, int64_t streams, int64_t hidden, int32_t iterations, double eps,
                             bool transposed) {
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

struct Settings {
  int32_t iterations;
  double eps;
  bool transposed;
};

bool run_proj_rms(const MhcBackend& be, const Inputs& in, const Settings& s, Outputs& out) {
  const Tensor x = in.read("x"), phi = in.read("phi");
  expect_rank(x, 3, "x", in);
  const auto problem =
      make_problem(x.shape()[0], x.shape()[1], x.shape()[2], s.iterations, s.eps, s.transposed);
  const DLDataType dt = x.dtype();
  const int64_t width = phi.shape().empty() ? 0 : phi.shape().back();
  Tensor& p = out.add("p", {x.shape()[0], width}, dt);
  Tensor& r = out.add("r", {x.shape()[0]}, dt);
  DLTensor xv = x.view(), phiv = phi.view(), pv = p.view(), rv = r.view();
  be.proj_rms_forward(problem, {sizeof(plx_mhc_proj_rms_forward_args), 0, &xv, &phiv, &pv, &rv}, nullptr);
  if (!all_present(in, {"g_p", "g_r"})) return false;
  const Tensor gp = in.read("g_p"), gr = in.read("g_r");
  Tensor& dx = out.add("dx", x.shape(), dt);
  Tensor& dphi = out.add("dphi", phi.shape(), dt);
  DLTensor gpv = gp.view(), grv = gr.view(), dxv = dx.view(), dphiv = dphi.view();
  be.proj_rms_backward(
      problem, {sizeof(plx_mhc_proj_rms_backward_args), 0, &xv, &phiv, &gpv, &grv, &dxv, &dphiv}, nullptr);
  return true;
}

bool run_mappings(const MhcBackend& be, const Inputs& in, const Settings& s, Outputs& out) {
  const Tensor p = in.read("p"), r = in.read("r"), alpha = in.read("alpha"), b = in.read("b");
  expect_rank(p, 2, "p", in);
  // W = n*n + 2n = (n + 1)^2 - 1
  const int64_t width = p.shape()[1];
  int64_t n = 1;
  while ((n + 1) * (n + 1) - 1 < width) ++n;
  if ((n + 1) * (n + 1) - 1 != width)
    throw std::runtime_error(in.file.path().string() + ": tensor \"" + in.prefix + "p\" has " +
                             std::to_string(width) + " columns, which is not n*n + 2n for any n");
  const int64_t tokens = p.shape()[0];
  const auto problem = make_problem(tokens, n, 1, s.iterations, s.eps, s.transposed);
  const DLDataType dt = p.dtype();
  Tensor& h_pre = out.add("h_pre", {tokens, n}, dt);
  Tensor& h_post = out.add("h_post", {tokens, n}, dt);
  Tensor& h_res = out.add("h_res", {tokens, n, n}, dt);
  DLTensor pv = p.view(), rv = r.view(), av = alpha.view(), bv = b.view();
  DLTensor prev = h_pre.view(), postv = h_post.view(), resv = h_res.view();
  be.mappings_forward(
      problem, {sizeof(plx_mhc_mappings_forward_args), 0, &pv, &rv, &av, &bv, &prev, &postv, &resv}, nullptr);
  if (!all_present(in, {"g_h_pre", "g_h_post", "g_h_res"})) return false;
  const Tensor g_pre = in.read("g_h_pre"), g_post = in.read("g_h_post"), g_res = in.read("g_h_res");
  Tensor& dp = out.add("dp", p.shape(), dt);
  Tensor& dr = out.add("dr", r.shape(), dt);
  Tensor& dalpha = out.add("dalpha", alpha.shape(), dt);
  Tensor& db = out.add("db", b.shape(), dt);
  DLTensor gprev = g_pre.view(), gpostv = g_post.view(), gresv = g_res.view();
  DLTensor dpv = dp.view(), drv = dr.view(), dav = dalpha.view(), dbv = db.view();
  be.mappings_backward(problem,
                       {sizeof(plx_mhc_mappings_backward_args), 0, &pv, &rv, &av, &bv, &gprev, &gpostv,
                        &gresv, &dpv, &drv, &dav, &dbv},
                       nullptr);
  return true;
}

bool run_aggregate(const MhcBackend& be, const Inputs& in, const Settings& s, Outputs& out) {
  const Tensor x = in.read("x"), h_pre = in.read("h_pre");
  expect_rank(x, 3, "x", in);
  const auto problem =
      make_problem(x.shape()[0], x.shape()[1], x.shape()[2], s.iterations, s.eps, s.transposed);
  const DLDataType dt = x.dtype();
  Tensor& u = out.add("u", {x.shape()[0], x.shape()[2]}, dt);
  DLTensor xv = x.view(), hv = h_pre.view(), uv = u.view();
  be.aggregate_forward(problem, {sizeof(plx_mhc_aggregate_forward_args), 0, &xv, &hv, &uv}, nullptr);
  if (!all_present(in, {"g_u"})) return false;
  const Tensor gu = in.read("g_u");
  Tensor& dx = out.add("dx", x.shape(), dt);
  Tensor& dh = out.add("dh_pre", h_pre.shape(), h_pre.dtype());
  DLTensor guv = gu.view(), dxv = dx.view(), dhv = dh.view();
  be.aggregate_backward(problem, {sizeof(plx_mhc_aggregate_backward_args), 0, &xv, &hv, &guv, &dxv, &dhv},
                        nullptr);
  return true;
}

bool run_post_res(const MhcBackend& be, const Inputs& in, const Settings& s, Outputs& out) {
  const Tensor x = in.read("x"), h_res = in.read("h_res"), h_post = in.read("h_post"), f = in.read("f");
  expect_rank(x, 3, "x", in);
  const std::optional<Tensor> bias = in.has("bias") ? std::optional<Tensor>(in.read("bias")) : std::nullopt;
  const auto problem =
      make_problem(x.shape()[0], x.shape()[1], x.shape()[2], s.iterations, s.eps, s.transposed);
  const DLDataType dt = x.dtype();
  Tensor& y = out.add("y", x.shape(), dt);
  DLTensor xv = x.view(), resv = h_res.view(), postv = h_post.view(), fv = f.view(), yv = y.view();
  DLTensor biasv = bias ? bias->view() : DLTensor{};
  const DLTensor* bias_ptr = bias ? &biasv : nullptr;
  be.post_res_forward(
      problem, {sizeof(plx_mhc_post_res_forward_args), 0, &xv, &resv, &postv, &fv, bias_ptr, &yv}, nullptr);
  if (!all_present(in, {"g_y"})) return false;
  const Tensor gy = in.read("g_y");
  Tensor& dx = out.add("dx", x.shape(), dt);
  Tensor& dres = out.add("dh_res", h_res.shape(), h_res.dtype());
  Tensor& dpost = out.add("dh_post", h_post.shape(), h_post.dtype());
  Tensor& df = out.add("df", f.shape(), dt);
  DLTensor gyv = gy.view(), dxv = dx.view(), dresv = dres.view(), dpostv = dpost.view(), dfv = df.view();
  DLTensor dbiasv{};
  DLTensor* dbias_ptr = nullptr;
  if (bias) {
    dbiasv = out.add("dbias", bias->shape(), dt).view();
    dbias_ptr = &dbiasv;
  }
  be.post_res_backward(problem,
                       {sizeof(plx_mhc_post_res_backward_args), 0, &xv, &resv, &postv, &fv, bias_ptr, &gyv,
                        &dxv, &dresv, &dpostv, &dfv, dbias_ptr},
                       nullptr);
  return true;
}

void write_outputs(const Outputs& out, const std::string& prefix, const std::filesystem::path& file) {
  ck::SafetensorsWriter writer;
  for (const auto& [name, t] : out.tensors) {
    const ck::DType dtype = t.dtype().bits == 64 ? ck::DType::f64 : ck::DType::f32;
    writer.add(prefix + name, dtype, t.shape(), {static_cast<const std::byte*>(t.raw()), t.bytes()});
  }
  writer.write(file);
}

}  // namespace

int op_command(const std::vector<std::string>& args) {
  return run_guarded("plexus op", [&] {
    std::string backend, primitive, input, output, prefix;
    std::vector<std::string> plugins;
    int32_t iterations = 20;
    double eps = 1e-6;
    bool transposed = false, help = false;
    PluginOptions plugin_options;
    po::options_description options("options");
    options.add_options()("backend", po::value(&backend), "the fusion backend component, e.g. mhc_native")(
        "primitive", po::value(&primitive), "proj_rms, mappings, aggregate or post_res")(
        "input", po::value(&input), "safetensors file with the primitive's inputs (and upstream gradients)")(
        "output", po::value(&output), "safetensors file to write the outputs and gradients to")(
        "prefix", po::value(&prefix), "prepended to every tensor name read and written")(
        "plugin", po::value(&plugins)->composing(),
        "plugin to load, by name or path (repeatable; default: the one named like the backend)")(
        "sinkhorn-iterations", po::value(&iterations)->default_value(iterations),
        "K (mhc.sinkhorn_iterations)")("eps", po::value(&eps)->default_value(eps), "mhc.eps")(
        "transposed", po::bool_switch(&transposed), "mix with H_res transposed (mhc.transposed_h_res)")(
        "help,h", po::bool_switch(&help), "this help");
    plugin_options.add_to(options);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(options).run(), vm);
    po::notify(vm);
    if (help) {
      std::cout << kHelp << "\n" << options;
      return 0;
    }
    for (const auto& [value, name] : {std::pair{&backend, "--backend"},
                                      {&primitive, "--primitive"},
                                      {&input, "--input"},
                                      {&output, "--output"}})
      if (value->empty()) throw po::error(std::string("the option ") + name + " is required");
    using Runner = bool (*)(const MhcBackend&, const Inputs&, const Settings&, Outputs&);
    const std::map<std::string, Runner> runners{{"proj_rms", &run_proj_rms},
                                                {"mappings", &run_mappings},
                                                {"aggregate", &run_aggregate},
                                                {"post_res", &run_post_res}};
    const auto runner = runners.find(primitive);
    if (runner == runners.end())
      throw po::error("--primitive " + primitive + ": expected proj_rms, mappings, aggregate or post_res");

    PluginHost host;
    const auto search_path = plugin_search_path(plugin_options.dirs());
    LoadOptions load_options;
    load_options.allow_world_writable = plugin_options.allow_world_writable;
    if (plugins.empty()) plugins.push_back(backend);
    for (const std::string& plugin : plugins) host.load(resolve_plugin(plugin, search_path), load_options);
    ConfigHandle config(boost::json::object(), "mhc.options");
    const MhcBackend be(host.get(PLX_KIND_FUSION_BACKEND, backend), DLDevice{kDLCPU, 0}, config.get());

    const Inputs in{ck::SafetensorsFile::open(input), prefix};
    Outputs out;
    const auto begin = std::chrono::steady_clock::now();
    const bool backward = runner->second(be, in, Settings{iterations, eps, transposed}, out);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    write_outputs(out, prefix, output);
    std::cout << backend << " " << primitive << ": forward"
              << (backward ? " and backward" : " only (no upstream gradients)") << " in " << ms
              << " ms; wrote";
    for (const auto& [name, t] : out.tensors) std::cout << " " << prefix << name << shape_string(t.shape());
    std::cout << " to " << output << "\n";
    return 0;
  });
}

}  // namespace plexus::cli
