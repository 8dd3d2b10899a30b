// The CUDA device of the mhc_fused fusion backend (the real built plugin) against its CPU device:
// the same random inputs go through every primitive, forward and backward, on cpu:0 and on
// cuda:0, and every output and gradient is compared.
//
// Cases (tests/support/mhc_case.hpp's draws, plus sizes that take every kernel path):
// - the standard cases with T = 133 (not a multiple of any block size: 8 tokens per block of the
//   per-token kernels, 32 per tile of proj_rms, 128 per block of the mappings): n in {1, 2, 4, 8},
//   ordinary, large (|h_res| ~ 1e3) and tiny-sum logits, eps = 0.5 with K = 3 where clamps carry
//   real mass, the transposed switch, no bias; all with C = 37 (odd: the scalar loads);
// - C = 64 and C = 40 (16-byte vector loads in float32 and bf16) for n in {1, 2, 4, 8}, with
//   large logits and the transposed switch;
// - n = 3 and n = 5 (matrices kept in scratch by the mappings, streams looped at run time by the
//   others) and n = 11 (W = 143: proj_rms in two passes of columns; the other kernels' generic
//   path with one warp per dot product);
// - n = 4, C = 256, T = 2000: proj_rms backward with several tiles per token range, several
//   ranges, and several blocks of dbias partial sums; n = 8, C = 8, T = 14000, K = 20: the
//   mappings' backward in two launches (its iterates are kept for up to 13107 tokens at a time).
//
// Error measure, per tensor: max |cuda - cpu| / max(max |cpu|, 1e-30), the error relative to the
// tensor's own scale (per-element relative error means nothing for the many elements near zero:
// saturated sigmoids, clamped columns).
//
// float32: every output within 1e-5. Both devices compute the same formulas in float32 with the
// same rounding steps where they matter (the CUDA mappings are compiled without fused
// multiply-adds, like the CPU backend, so h and the Sinkhorn iterations round alike); they differ
// in the order of long sums (the projection over n*C, the dot products over C, the sums over
// tokens), in CUDA's expf (within 2 ulp; glibc's is correctly rounded) and in fused multiply-adds
// in the streaming kernels: each ~1e-7 of the tensor's scale at these sizes, so 1e-5 leaves a
// wide margin, while a missing or doubled term is O(1).
//
// bfloat16 activations (x, f, bias, du, dy and u, y, dx, df, dbias): the CPU runs in float32 on the
// same inputs rounded to bf16, so the difference is the GPU's rounding of its activation outputs
// to bf16, once, to nearest even: at most 2^-8 of the element, hence of the tensor's largest
// value; the bar is 2^-7. (proj_rms's dx at n > 8 is rounded once per pass of 80 columns: 2^-6
// there.) The mapping-dtype outputs of those calls (p, r, dphi, dH_pre, dH_res, dH_post) are
// float32 computed from the same bf16 values: 1e-5 as above.
//
// Also: written outputs start as NaN (an element the kernels miss shows up), accumulated ones from
// non-zero values and add up over two calls, results repeat bit for bit in both dtypes (no float
// atomics), a stream from the host gives the default stream's bits, T = 0, outputs not asked for
// (on the register and the generic paths), and refusals.
//
// Reported skipped by ctest (exit 77) where there is no CUDA GPU, or the build has no CUDA, or the
// plugin is not built.
#define BOOST_TEST_MODULE mhc_fused_cuda
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "mhc_case.hpp"
#include "mhc_gpu_calls.hpp"
#include "plexus/core/components.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "plexus/core/errors.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/mhc_backend.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/fusion.h"
#include "plexus/mhc.h"
#include "skip_module.hpp"

namespace {

using namespace plexus::test::mhc_gpu;  // NOLINT: the shared case machinery

const std::string kBackend = "mhc_fused";  // the backend under test

Case make_case(const std::string& name, int64_t n, int64_t C, int64_t T, Logits logits = Logits::ordinary) {
  Case c;
  c.name = name;
  c.n = n;
  c.C = C;
  c.T = T;
  c.logits = logits;
  return c;
}

std::vector<Case> cases() {
  std::vector<Case> all = plexus::test::standard_mhc_cases(133);
  for (int64_t n : {1, 2, 4, 8}) all.push_back(make_case('n' + std::to_string(n) + "_C64", n, 64, 133));
  all.push_back(make_case("n4_C64_large", 4, 64, 133, Logits::large));
  Case transposed = make_case("n8_C40_transposed", 8, 40, 133, Logits::tiny_sums);
  transposed.transposed = true;
  all.push_back(transposed);
  all.push_back(make_case("n3_C37", 3, 37, 133));
  all.push_back(make_case("n5_C64_large", 5, 64, 133, Logits::large));
  Case wide = make_case("n11_C37", 11, 37, 45);
  wide.K = 5;
  all.push_back(wide);
  wide.name = "n11_C64_transposed_no_bias";
  wide.C = 64;
  wide.transposed = true;
  wide.bias = false;
  all.push_back(wide);
  all.push_back(make_case("n4_C256_T2000", 4, 256, 2000));
  all.push_back(make_case("n8_C8_T14000", 8, 8, 14000, Logits::tiny_sums));
  return all;
}

// ---- bfloat16 on the host (round to nearest even, as the device's __float2bfloat16_rn) ----

uint16_t to_bf16(float value) {
  const auto u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}
float round_bf16(float value) {
  return from_bf16(to_bf16(value));
}

// A host float32 tensor as a bf16 one, and back.
plexus::Tensor as_bf16(const plexus::Tensor& t) {
  plexus::Tensor out(t.shape(), plx_dtype_bf16(), kCpu);
  for (int64_t i = 0; i < t.numel(); ++i) out.data<uint16_t>()[i] = to_bf16(t.data<float>()[i]);
  return out;
}
plexus::Tensor as_f32(const plexus::Tensor& t) {
  if (plx_dtype_equal(t.dtype(), plx_dtype_f32())) return t.to(kCpu);
  const plexus::Tensor host = t.to(kCpu);
  plexus::Tensor out(host.shape(), plx_dtype_f32(), kCpu);
  for (int64_t i = 0; i < host.numel(); ++i) out.data<float>()[i] = from_bf16(host.data<uint16_t>()[i]);
  return out;
}

// Tensors of the activation dtype (the others are of the mapping dtype, float32).
const std::set<std::string> kActivations = {"x", "f",  "bias",  "g_u",         "g_y",          "u",
                                            "y", "df", "dbias", "proj_rms.dx", "aggregate.dx", "post_res.dx"};
bool is_activation(const std::string& name) {
  return kActivations.count(name) != 0;
}

// The bf16 counterparts of a case's tensors: activations rounded to bf16. `stored`: as bf16
// tensors (what the GPU gets); otherwise as float32 tensors holding the rounded values (what the
// CPU reference gets).
Tensors rounded(const Tensors& tensors, bool stored) {
  Tensors out;
  for (const auto& [name, t] : tensors) {
    const std::string base = name.rfind("start.", 0) == 0 ? name.substr(6) : name;
    if (!is_activation(base)) {
      out[name] = t.to(kCpu);
    } else if (stored) {
      out[name] = as_bf16(t);
    } else {
      plexus::Tensor r = t.to(kCpu);
      for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = round_bf16(r.data<float>()[i]);
      out[name] = std::move(r);
    }
  }
  return out;
}

// The case on the CPU (float32): the reference results.
Tensors run_cpu(const Case& c, const Tensors& in) {
  static const Backend cpu(kBackend, kCpu);
  Tensors out = fresh_outputs(c, &in);
  run_all(*cpu, c, in, out);
  return out;
}

// The case on the GPU with float32 or (bf16) bfloat16 activations; results copied back to the
// host as float32. The device is synchronized after the uploads (a host stream need not wait for
// the default stream's copies) and before the downloads.
Tensors run_gpu(const plexus::MhcBackend& gpu, const Case& c, const Tensors& in, bool bf16,
                plx_stream stream = nullptr, const plx_host_api* api = nullptr) {
  const Tensors start = fresh_outputs(c, &in);
  const Tensors device_in = bf16 ? to_device(rounded(in, true), kGpu) : to_device(in, kGpu);
  const Tensors device_out = bf16 ? to_device(rounded(start, true), kGpu) : to_device(start, kGpu);
  plexus::device::synchronize(kGpu);
  run_all(gpu, c, device_in, device_out, stream);
  if (stream != nullptr) BOOST_TEST_REQUIRE(api->stream_synchronize(api->ctx, stream) == PLX_OK);
  plexus::device::synchronize(kGpu);
  Tensors back;
  for (const auto& [name, t] : device_out) back[name] = as_f32(t);
  return back;
}

// The bars of the file comment.
constexpr double kFloat32Bar = 1e-5;
double bf16_bar(const Case& c, const std::string& name) {
  if (!is_activation(name)) return kFloat32Bar;
  return c.n > 8 && name == "proj_rms.dx" ? 1.0 / 64 : 1.0 / 128;
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(
    plexus::device::cuda_device_count() > 0 && std::filesystem::exists(plugin_path(kBackend)),
    "no CUDA GPU here (or a build without CUDA, or without the mhc_fused plugin): its CUDA device needs one")

BOOST_AUTO_TEST_CASE(mhc_fused_declares_cpu_and_cuda) {
  const auto& backend = component(kBackend).as<plx_fusion_backend_v1>();
  BOOST_TEST(backend.device_mask == (PLX_DEVICE_BIT(kDLCPU) | PLX_DEVICE_BIT(kDLCUDA)));
}

BOOST_AUTO_TEST_CASE(float32_on_cuda_matches_the_cpu) {
  const Backend gpu(kBackend, kGpu);
  double worst_forward = 0, worst_gradient = 0;
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    const Tensors in = make_inputs(c, seed++);
    const Tensors cpu = run_cpu(c, in);
    const Tensors ours = run_gpu(*gpu, c, in, false);
    for (const auto& [name, ref] : cpu) {
      const std::string key = c.name + "/" + name;
      const double error = scaled_error(ours.at(name), ref, key);
      double& worst = is_forward(name) ? worst_forward : worst_gradient;
      worst = std::max(worst, error);
      BOOST_TEST(error < kFloat32Bar, key << ": scaled error " << error);
    }
  }
  BOOST_TEST_MESSAGE("float32, cuda against cpu: worst scaled error " << worst_forward << " forward, "
                                                                      << worst_gradient << " gradients");
}

BOOST_AUTO_TEST_CASE(bfloat16_on_cuda_matches_the_cpu_on_the_same_rounded_inputs) {
  const Backend gpu(kBackend, kGpu);
  double worst_activation = 0, worst_mapping = 0;
  uint64_t seed = 101;
  for (const Case& c : cases()) {
    const Tensors in = make_inputs(c, seed++);
    const Tensors cpu = run_cpu(c, rounded(in, false));
    const Tensors ours = run_gpu(*gpu, c, in, true);
    for (const auto& [name, ref] : cpu) {
      const std::string key = c.name + "/" + name;
      const double error = scaled_error(ours.at(name), ref, key);
      double& worst = is_activation(name) ? worst_activation : worst_mapping;
      worst = std::max(worst, error);
      BOOST_TEST(error < bf16_bar(c, name), key << ": scaled error " << error);
    }
  }
  BOOST_TEST_MESSAGE("bfloat16, cuda against cpu: worst scaled error "
                     << worst_activation << " of bf16 outputs, " << worst_mapping << " of float32 outputs");
}

BOOST_AUTO_TEST_CASE(results_repeat_bit_for_bit) {
  const Backend gpu(kBackend, kGpu);
  for (const Case& c : cases()) {
    if (c.name != "n4_ordinary" && c.name != "n11_C37" && c.name != "n4_C256_T2000") continue;
    const Tensors in = make_inputs(c, 99);
    for (const bool bf16 : {false, true}) {
      const Tensors first = run_gpu(*gpu, c, in, bf16);
      const Tensors second = run_gpu(*gpu, c, in, bf16);
      for (const auto& [name, t] : first)
        BOOST_TEST(same_bits(t, second.at(name)), c.name << (bf16 ? " bf16/" : " f32/") << name);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_host_stream_gives_the_default_streams_bits) {
  plexus::HostServices services;
  const plx_host_api* api = services.table_for("test");
  plx_stream stream = nullptr;
  BOOST_TEST_REQUIRE(api->stream_create(api->ctx, kGpu, 0, &stream) == PLX_OK);
  {
    const Backend gpu(kBackend, kGpu);
    const Case c = make_case("n4_C64_stream", 4, 64, 133);
    const Tensors in = make_inputs(c, 7);
    const Tensors on_default = run_gpu(*gpu, c, in, false);
    const Tensors on_stream = run_gpu(*gpu, c, in, false, stream, api);
    for (const auto& [name, t] : on_default) BOOST_TEST(same_bits(t, on_stream.at(name)), name);
  }
  api->stream_destroy(api->ctx, stream);
}

// Every backward twice into the same outputs, from zero: accumulated gradients double, written
// ones are the same again.
BOOST_AUTO_TEST_CASE(accumulated_outputs_add_up_written_ones_are_overwritten) {
  const Backend gpu(kBackend, kGpu);
  for (const Case& c : {make_case("n4_twice", 4, 37, 133), make_case("n11_twice", 11, 64, 45)}) {
    const Tensors in = make_inputs(c, 11);
    const Tensors device_in = to_device(in, kGpu);
    const Tensors device_out = to_device(fresh_outputs(c), kGpu);
    run_all(*gpu, c, device_in, device_out);
    const Tensors once = to_device(device_out, kCpu);
    run_all(*gpu, c, device_in, device_out);
    const Tensors twice = to_device(device_out, kCpu);
    for (const auto& [name, o] : outputs(c)) {
      const std::string key = c.name + "/" + name;
      if (!o.accumulated) {
        BOOST_TEST(same_bits(once.at(name), twice.at(name)), key << " is written, not accumulated");
        continue;
      }
      plexus::Tensor doubled = once.at(name).to(kCpu);
      for (int64_t k = 0; k < doubled.numel(); ++k) doubled.data<float>()[k] *= 2.0f;
      BOOST_TEST(scaled_error(twice.at(name), doubled, key) < 1e-6, key << " does not accumulate");
    }
  }
}

// Outputs not asked for are skipped, and what is asked for does not depend on them: post_res'
// with only dbias (df goes to the block sums only), then with only dH_post; mappings' with only db
// and dalpha; proj_rms' with only dphi, then with only dx; aggregate' with only dH_pre. On the
// register paths (n = 2) and the generic ones (n = 11).
BOOST_AUTO_TEST_CASE(outputs_not_asked_for_are_skipped) {
  const Backend gpu(kBackend, kGpu);
  for (Case c : {make_case("n2_partial", 2, 37, 133), make_case("n11_partial", 11, 64, 45)}) {
    c.K = 5;
    const Tensors in = make_inputs(c, 5);
    const Tensors all = run_cpu(c, in);  // accumulated outputs start from in["start.*"]
    const Tensors device_in = to_device(in, kGpu);
    const Tensors device_out = to_device(fresh_outputs(c, &in), kGpu);
    Views i(device_in), o(device_out);
    const plx_mhc_problem pb = c.problem();
    const auto post_res = [&](DLTensor* dh_post, DLTensor* dbias) {
      gpu->post_res_backward(pb,
                             {.struct_size = sizeof(plx_mhc_post_res_backward_args),
                              .reserved = 0,
                              .x = i["x"],
                              .h_res = i["h_res"],
                              .h_post = i["h_post"],
                              .f = i["f"],
                              .bias = i["bias"],
                              .dy = i["g_y"],
                              .dx = nullptr,
                              .dh_res = nullptr,
                              .dh_post = dh_post,
                              .df = nullptr,
                              .dbias = dbias},
                             nullptr);
    };
    post_res(nullptr, o["dbias"]);
    post_res(o["dh_post"], nullptr);
    gpu->mappings_backward(pb,
                           {.struct_size = sizeof(plx_mhc_mappings_backward_args),
                            .reserved = 0,
                            .p = i["p"],
                            .r = i["r"],
                            .alpha = i["alpha"],
                            .b = i["b"],
                            .dh_pre = i["g_h_pre"],
                            .dh_post = i["g_h_post"],
                            .dh_res = i["g_h_res"],
                            .dp = nullptr,
                            .dr = nullptr,
                            .dalpha = o["dalpha"],
                            .db = o["db"]},
                           nullptr);
    const auto proj_rms = [&](DLTensor* dx, DLTensor* dphi) {
      gpu->proj_rms_backward(pb,
                             {.struct_size = sizeof(plx_mhc_proj_rms_backward_args),
                              .reserved = 0,
                              .x = i["x"],
                              .phi = i["phi"],
                              .dp = i["g_p"],
                              .dr = i["g_r"],
                              .dx = dx,
                              .dphi = dphi},
                             nullptr);
    };
    proj_rms(nullptr, o["dphi"]);
    proj_rms(o["proj_rms.dx"], nullptr);
    gpu->aggregate_backward(pb,
                            {.struct_size = sizeof(plx_mhc_aggregate_backward_args),
                             .reserved = 0,
                             .x = i["x"],
                             .h_pre = i["h_pre"],
                             .du = i["g_u"],
                             .dx = nullptr,
                             .dh_pre = o["dh_pre"]},
                            nullptr);
    const Tensors ours = to_device(device_out, kCpu);
    for (const std::string name : {"dbias", "dh_post", "dalpha", "db", "dphi", "proj_rms.dx", "dh_pre"})
      BOOST_TEST(scaled_error(ours.at(name), all.at(name), name) < kFloat32Bar, c.name << "/" << name);
    for (const std::string name : {"df", "dh_res", "dp", "dr"}) {  // untouched: still NaN
      const plexus::Tensor& t = ours.at(name);
      BOOST_TEST(
          std::all_of(t.data<float>(), t.data<float>() + t.numel(), [](float v) { return std::isnan(v); }),
          c.name << "/" << name << " was written although not asked for");
    }
    for (const std::string name : {"post_res.dx", "aggregate.dx"})  // untouched: still the start
      BOOST_TEST(same_bits(ours.at(name), in.at("start." + name)),
                 c.name << "/" << name << " was written although not asked for");
  }
}

BOOST_AUTO_TEST_CASE(no_tokens_is_a_no_op) {
  const Backend gpu(kBackend, kGpu);
  for (const bool bf16 : {false, true}) {
    const Case c = make_case("n4_empty", 4, 37, 0);
    const Tensors in = make_inputs(c, 3);
    const Tensors ours =
        run_gpu(*gpu, c, in, bf16);  // accumulated outputs keep their start, the rest is empty
    const Tensors in_rounded = rounded(in, false);
    for (const std::string name : {"dphi", "dalpha", "db", "dbias"}) {
      const plexus::Tensor& start = (bf16 ? in_rounded : in).at("start." + name);
      BOOST_TEST(same_bits(ours.at(name), start), name << (bf16 ? " (bf16)" : ""));
    }
  }
}

BOOST_AUTO_TEST_CASE(refusals) {
  const Backend gpu(kBackend, kGpu);
  const Backend cpu(kBackend, kCpu);
  const Case c = make_case("n2_refusals", 2, 37, 3);
  const Tensors host_in = make_inputs(c, 2);
  const Tensors host_out = fresh_outputs(c);
  const Tensors device_in = to_device(host_in, kGpu);
  const Tensors device_out = to_device(fresh_outputs(c), kGpu);
  const auto refused = [](auto&& call, int status, const std::string& words) {
    try {
      call();
    } catch (const plexus::ComponentCallError& e) {
      BOOST_TEST_MESSAGE("refused: " << e.what());
      BOOST_TEST(e.status() == status, e.what());
      BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
      return;
    }
    BOOST_ERROR("not refused (expected: " << words << ")");
  };
  // Tensors on the GPU for a CPU instance, and on the CPU for a GPU instance.
  refused([&] { run_all(*cpu, c, device_in, device_out); }, PLX_ERR_INVALID_ARGUMENT, "cuda:0");
  refused([&] { run_all(*gpu, c, host_in, host_out); }, PLX_ERR_INVALID_ARGUMENT, "cpu:0");
  const plx_mhc_problem pb = c.problem();
  const auto aggregate = [&](const Backend& be, DLDataType dtype, DLDevice device) {
    const plexus::Tensor x({c.T, c.n, c.C}, dtype, device);
    const plexus::Tensor h_pre({c.T, c.n}, plx_dtype_equal(dtype, plx_dtype_f64()) ? dtype : plx_dtype_f32(),
                               device);
    const plexus::Tensor u({c.T, c.C}, dtype, device);
    DLTensor xv = x.view(), hv = h_pre.view(), uv = u.view();
    be->aggregate_forward(pb,
                          {.struct_size = sizeof(plx_mhc_aggregate_forward_args),
                           .reserved = 0,
                           .x = &xv,
                           .h_pre = &hv,
                           .u = &uv},
                          nullptr);
  };
  // float64 runs on the CPU only, bfloat16 on CUDA only.
  refused([&] { aggregate(gpu, plx_dtype_f64(), kGpu); }, PLX_ERR_UNSUPPORTED, "float64");
  refused([&] { aggregate(cpu, plx_dtype_bf16(), kCpu); }, PLX_ERR_UNSUPPORTED, "bfloat16");
  // A GPU that is not there.
  BOOST_CHECK_EXCEPTION(Backend(kBackend, DLDevice{kDLCUDA, plexus::device::cuda_device_count()}),
                        plexus::ComponentCallError, [](const plexus::ComponentCallError& e) {
                          BOOST_TEST_MESSAGE("refused: " << e.what());
                          return e.status() == PLX_ERR_UNSUPPORTED;
                        });
}
