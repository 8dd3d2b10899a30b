// The CUDA device of the mhc_native fusion backend (the real built plugin) against its CPU
// device: the same random float32 inputs go through every primitive, forward and backward, on
// cpu:0 and on cuda:0, and every output and gradient is compared.
//
// Cases: n in {1, 2, 4, 8}, C = 37 (odd, not a multiple of any block size), T = 133 (likewise),
// K = 20, eps = 1e-6, with ordinary logits, large logits (|h_res| ~ 1e3, one column per row 2000
// above the others: the row max must be subtracted) and tiny sums (one column of logits 25 below
// the others: its sums are clamped to eps); eps = 0.5 with K = 3, where clamps carry real mass
// (spread logits; rows dominated by column 0); the transposed switch; post_res without a bias;
// and n = 8 with T = 2000, which takes the CUDA side through several Sinkhorn token blocks and
// several chunks of its sums over tokens. These are the draws of tests/integration/
// test_mhc_parity.cpp, which keep every Sinkhorn sum away from eps, so float32 rounding cannot
// switch a clamp.
//
// Error measure, per tensor: max |cuda - cpu| / max(max |cpu|, 1e-30), the error relative to the
// tensor's own scale (per-element relative error means nothing for the many elements near zero:
// saturated sigmoids, clamped columns). Bars: forward 1e-5, gradients 1e-4. The two devices run
// the same passes in the same order; they differ in expf (CUDA's is within 2 ulp, glibc's
// correctly rounded), in cuBLAS's summation order for the projection, and in the order of the long
// double-precision sums, so the errors expected are ~1e-7 (the worst are logged).
//
// Also: written outputs start as NaN (so an element the kernels miss shows up), accumulated ones
// add up over two backward calls, results repeat bit for bit (no float atomics), a stream from
// the host gives the same bits as the default stream, T = 0, outputs not asked for, and refusals.
//
// Reported skipped by ctest (exit 77) where there is no CUDA GPU, or the build has no CUDA.
#define BOOST_TEST_MODULE mhc_native_cuda
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

const std::string kBackend = "mhc_native";  // the backend under test

// 133 tokens per case: not a multiple of any block size of the GPU kernels; plus one case that
// spans several token blocks of the Sinkhorn workspace.
std::vector<Case> cases() {
  std::vector<Case> all = plexus::test::standard_mhc_cases(133);
  Case blocks;
  blocks.name = "n8_T2000_blocks";
  blocks.n = 8;
  blocks.T = 2000;
  all.push_back(blocks);
  return all;
}

// The case on the CPU: the reference results.
Tensors run_cpu(const Case& c, const Tensors& in) {
  static const Backend cpu(kBackend, kCpu);
  Tensors out = fresh_outputs(c);
  run_all(*cpu, c, in, out);
  return out;
}

// The case on the GPU, results copied back to the host. The device is synchronized after the
// uploads (a host stream need not wait for the default stream's copies) and before the downloads.
Tensors run_gpu(const plexus::MhcBackend& gpu, const Case& c, const Tensors& in, plx_stream stream = nullptr,
                const plx_host_api* api = nullptr) {
  const Tensors device_in = to_device(in, kGpu);
  const Tensors device_out = to_device(fresh_outputs(c), kGpu);
  plexus::device::synchronize(kGpu);
  run_all(gpu, c, device_in, device_out, stream);
  if (stream != nullptr) BOOST_TEST_REQUIRE(api->stream_synchronize(api->ctx, stream) == PLX_OK);
  plexus::device::synchronize(kGpu);
  return to_device(device_out, kCpu);
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(
    plexus::device::cuda_device_count() > 0,
    "no CUDA GPU here (or a build without CUDA): the CUDA device of mhc_native needs one")

BOOST_AUTO_TEST_CASE(mhc_native_declares_cpu_and_cuda) {
  const auto& backend = component(kBackend).as<plx_fusion_backend_v1>();
  BOOST_TEST(backend.device_mask == (PLX_DEVICE_BIT(kDLCPU) | PLX_DEVICE_BIT(kDLCUDA)));
}

BOOST_AUTO_TEST_CASE(every_primitive_on_cuda_matches_the_cpu) {
  const Backend gpu(kBackend, kGpu);
  double worst_forward = 0, worst_gradient = 0;
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    const Tensors in = make_inputs(c, seed++);
    const Tensors cpu = run_cpu(c, in);
    const Tensors ours = run_gpu(*gpu, c, in);
    for (const auto& [name, ref] : cpu) {
      const std::string key = c.name + "/" + name;
      const double error = scaled_error(ours.at(name), ref, key);
      const bool forward = is_forward(name);
      (forward ? worst_forward : worst_gradient) = std::max(forward ? worst_forward : worst_gradient, error);
      BOOST_TEST(error < (forward ? 1e-5 : 1e-4), key << ": scaled error " << error);
    }
  }
  BOOST_TEST_MESSAGE("cuda against cpu: worst scaled error " << worst_forward << " forward, "
                                                             << worst_gradient << " gradients");
}

BOOST_AUTO_TEST_CASE(results_repeat_bit_for_bit) {
  const Backend gpu(kBackend, kGpu);
  for (const Case& c : cases()) {
    if (c.name != "n4_ordinary" && c.name != "n8_T2000_blocks") continue;
    const Tensors in = make_inputs(c, 99);
    const Tensors first = run_gpu(*gpu, c, in);
    const Tensors second = run_gpu(*gpu, c, in);
    for (const auto& [name, t] : first) BOOST_TEST(same_bits(t, second.at(name)), c.name << "/" << name);
  }
}

BOOST_AUTO_TEST_CASE(a_host_stream_gives_the_default_streams_bits) {
  plexus::HostServices services;
  const plx_host_api* api = services.table_for("test");
  plx_stream stream = nullptr;
  BOOST_TEST_REQUIRE(api->stream_create(api->ctx, kGpu, 0, &stream) == PLX_OK);
  {
    const Backend gpu(kBackend, kGpu);
    Case c;
    c.name = "n4_stream";
    const Tensors in = make_inputs(c, 7);
    const Tensors on_default = run_gpu(*gpu, c, in);
    const Tensors on_stream = run_gpu(*gpu, c, in, stream, api);
    for (const auto& [name, t] : on_default) BOOST_TEST(same_bits(t, on_stream.at(name)), name);
  }
  api->stream_destroy(api->ctx, stream);
}

// Run every backward twice into the same outputs: accumulated gradients double, written ones are
// the same again.
BOOST_AUTO_TEST_CASE(accumulated_outputs_add_up_written_ones_are_overwritten) {
  const Backend gpu(kBackend, kGpu);
  Case c;
  c.name = "n4_twice";
  const Tensors in = make_inputs(c, 11);
  const Tensors device_in = to_device(in, kGpu);
  const Tensors device_out = to_device(fresh_outputs(c), kGpu);
  run_all(*gpu, c, device_in, device_out);
  const Tensors once = to_device(device_out, kCpu);
  run_all(*gpu, c, device_in, device_out);
  const Tensors twice = to_device(device_out, kCpu);
  for (const auto& [name, o] : outputs(c)) {
    if (!o.accumulated) {
      BOOST_TEST(same_bits(once.at(name), twice.at(name)), name << " is written, not accumulated");
      continue;
    }
    plexus::Tensor doubled = once.at(name).to(kCpu);
    for (int64_t k = 0; k < doubled.numel(); ++k) doubled.data<float>()[k] *= 2.0f;
    BOOST_TEST(scaled_error(twice.at(name), doubled, name) < 1e-6, name << " does not accumulate");
  }
}

// Outputs not asked for are skipped, and what is asked for does not depend on them: post_res'
// with only dbias (df goes to a temporary), mappings' with only db and dalpha, proj_rms' with
// only dphi, aggregate' with only dH_pre.
BOOST_AUTO_TEST_CASE(outputs_not_asked_for_are_skipped) {
  const Backend gpu(kBackend, kGpu);
  Case c;
  c.name = "n2_partial";
  c.n = 2;
  const Tensors in = make_inputs(c, 5);
  const Tensors all = run_cpu(c, in);
  const Tensors device_in = to_device(in, kGpu);
  const Tensors device_out = to_device(fresh_outputs(c), kGpu);
  Views i(device_in), o(device_out);
  const plx_mhc_problem pb = c.problem();
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
                          .dh_post = nullptr,
                          .df = nullptr,
                          .dbias = o["dbias"]},
                         nullptr);
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
  gpu->proj_rms_backward(pb,
                         {.struct_size = sizeof(plx_mhc_proj_rms_backward_args),
                          .reserved = 0,
                          .x = i["x"],
                          .phi = i["phi"],
                          .dp = i["g_p"],
                          .dr = i["g_r"],
                          .dx = nullptr,
                          .dphi = o["dphi"]},
                         nullptr);
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
  for (const std::string name : {"dbias", "dalpha", "db", "dphi", "dh_pre"})
    BOOST_TEST(scaled_error(ours.at(name), all.at(name), name) < 1e-4, name);
  for (const std::string name : {"df", "dh_res", "dh_post", "dp", "dr"}) {  // untouched: still NaN
    const plexus::Tensor& t = ours.at(name);
    BOOST_TEST(std::isnan(t.data<float>()[0]), name << " was written although not asked for");
  }
  for (const std::string name : {"post_res.dx", "proj_rms.dx", "aggregate.dx"}) {  // untouched: still 0
    const plexus::Tensor& t = ours.at(name);
    BOOST_TEST(std::all_of(t.data<float>(), t.data<float>() + t.numel(), [](float v) { return v == 0.0f; }),
               name << " was written although not asked for");
  }
}

BOOST_AUTO_TEST_CASE(no_tokens_is_a_no_op) {
  const Backend gpu(kBackend, kGpu);
  Case c;
  c.name = "n4_empty";
  c.T = 0;
  const Tensors in = make_inputs(c, 3);
  const Tensors ours = run_gpu(*gpu, c, in);  // accumulated outputs stay zero, T-sized ones are empty
  for (const std::string name : {"dphi", "dalpha", "db", "dbias"}) {
    const plexus::Tensor& t = ours.at(name);
    BOOST_TEST(std::all_of(t.data<float>(), t.data<float>() + t.numel(), [](float v) { return v == 0.0f; }),
               name);
  }
}

BOOST_AUTO_TEST_CASE(refusals) {
  const Backend gpu(kBackend, kGpu);
  const Backend cpu(kBackend, kCpu);
  Case c;
  c.name = "n2_refusals";
  c.n = 2;
  c.T = 3;
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
  // float64 runs on the CPU only.
  {
    const plx_mhc_problem pb = c.problem();
    const plexus::Tensor x({c.T, c.n, c.C}, plx_dtype_f64(), kGpu);
    const plexus::Tensor h_pre({c.T, c.n}, plx_dtype_f64(), kGpu);
    const plexus::Tensor u({c.T, c.C}, plx_dtype_f64(), kGpu);
    DLTensor xv = x.view(), hv = h_pre.view(), uv = u.view();
    refused(
        [&] {
          gpu->aggregate_forward(pb,
                                 {.struct_size = sizeof(plx_mhc_aggregate_forward_args),
                                  .reserved = 0,
                                  .x = &xv,
                                  .h_pre = &hv,
                                  .u = &uv},
                                 nullptr);
        },
        PLX_ERR_UNSUPPORTED, "float64");
  }
  // A GPU that is not there.
  BOOST_CHECK_EXCEPTION(Backend(kBackend, DLDevice{kDLCUDA, plexus::device::cuda_device_count()}),
                        plexus::ComponentCallError, [](const plexus::ComponentCallError& e) {
                          BOOST_TEST_MESSAGE("refused: " << e.what());
                          return e.status() == PLX_ERR_UNSUPPORTED;
                        });
}
