// mamba.mixer's CUDA path against its CPU path: the layer is created twice from one config, on
// the CPU and on cuda:0, given the same float32 inputs, parameters and upstream gradient, run
// forward (training) and backward, and its output, input gradient and every parameter gradient
// compared. Both sides compute in float32 (TF32 off on the GPU).
//
// Tolerances, max |gpu - cpu| <= tol * max |cpu| over each tensor (relative to the tensor's own
// scale, as in integration.test_mamba_parity: the relative error of elements near zero means
// nothing): 2e-5 for the output, 2e-4 for the input and parameter gradients. Why: the parity test
// holds the CPU's float32 to 1e-5 (forward) and 1e-4 (gradients) of the exact float64 result;
// the GPU computes the same decomposition in float32 with other summation orders (cuBLAS against
// OpenBLAS, block reductions against the CPU's loops), CUDA's expf/log1pf against the CPU's
// approximations (both within a few float ulp) and fused multiply-adds; it is held to the same
// bars, so the two differ by at most twice them. The float64 cumulative decays are the same sums
// on both sides. A wrong index, a lost term or an overwritten accumulation is off by order 1.
//
// Parameter gradients start from non-zero values on both sides (half the size of the gradient
// itself, drawn after a first CPU run from zero), and their increments are compared, so
// overwriting instead of accumulating fails by far more than the bar. The GPU's input gradient
// starts as NaN: an element left unwritten fails.
//
// Also: lengths that are and are not multiples of chunk_size, a chunk longer than the sequence
// and chunks of one token, G = 1, G = 2 (two heads per group) and G = H, both branches of
// softplus, LayerNorm, an explicit mamba_num_heads with d_conv 3; two microbatches interleaved;
// bit-identical results on repeated runs and on a host stream; an inference forward that keeps
// nothing; the custom initializers writing a device tensor; and the refusals (float64 and
// bfloat16, tensors on the CPU, a backward without a training forward or of another shape, a
// device past the last).
//
// Without a CUDA device (or in a build without CUDA) the module reports itself skipped (77).
#define BOOST_TEST_MODULE mamba_cuda
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../unit/test_mamba_support.hpp"
#include "gpu_layer_calls.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "plexus/core/host_services.hpp"
#include "skip_module.hpp"

PLEXUS_SKIP_MODULE_UNLESS(plexus::device::cuda_device_count() > 0,
                          "no CUDA GPU here (or a build without CUDA): mamba.mixer's CUDA path needs one")

namespace {

using namespace gpu_test;
using mamba_test::Config;
using mamba_test::Dt;
using Tensor = tt::Tensor;

constexpr double kOutputTol = 2e-5, kGradTol = 2e-4;

// d_model 16, state 16, head_dim 8: d_inner 32 in 4 heads.
Config config(int64_t groups, int64_t chunk, const std::string& normalization = "RMSNorm") {
  Config c;
  c.options["mamba_num_groups"] = groups;
  c.options["chunk_size"] = chunk;
  c.normalization = normalization;
  return c;
}

plexus::Tensor filled(const std::vector<int64_t>& shape, float value) {
  Tensor t(shape, kF32);
  t.fill(static_cast<double>(value));
  return upload(t);
}

// What one forward and backward gave: the output, the input gradient, every parameter gradient.
struct Result {
  std::vector<double> out, dx;
  std::vector<std::vector<double>> grads;
};

// The CPU in float32: forward (training), backward with the gradients starting at `before`.
Result run_cpu(const plexus::LayerInstance& layer, const std::vector<Tensor>& params, const Tensor& x,
               const Tensor& dy, const std::vector<Tensor>& before) {
  tt::Run run(layer, {x}, params, kF32);
  run.forward();
  std::vector<Tensor> go = {dy}, gi = {Tensor(x.shape, kF32)}, pg = before;
  run.backward(go, gi, pg);
  Result r{run.outputs[0].values(), gi[0].values(), {}};
  for (const Tensor& g : pg) r.grads.push_back(g.values());
  return r;
}

// The same on the GPU, on `stream` (NULL: the default stream), the input gradient starting as NaN.
Result run_gpu(const plexus::LayerInstance& layer, const std::vector<Tensor>& params, const Tensor& x,
               const Tensor& dy, const std::vector<Tensor>& before, plx_stream stream = nullptr,
               const plx_host_api* api = nullptr) {
  DeviceRun run(layer, tensors(upload(x)), upload_all(params));
  run.stream = stream;
  run.forward();
  std::vector<plexus::Tensor> go = tensors(upload(dy)), gi = tensors(filled(x.shape, std::nanf(""))),
                              pg = upload_all(before);
  run.backward(go, {}, gi, {}, pg);
  // Copies synchronize with the default stream only: wait for a host stream first.
  if (stream != nullptr) BOOST_TEST_REQUIRE(api->stream_synchronize(api->ctx, stream) == PLX_OK);
  Result r{download(run.outputs[0]), download(gi[0]), {}};
  for (const plexus::Tensor& g : pg) r.grads.push_back(download(g));
  return r;
}

// Starting values for the parameter gradients: per parameter, U(-0.5, 0.5) times the largest
// gradient a CPU run from zero gives it (1 where that is zero), so that an overwrite fails and the
// rounding of before + increment stays far below the bar.
std::vector<Tensor> starting_grads(const plexus::LayerInstance& layer, const std::vector<Tensor>& params,
                                   const Tensor& x, const Tensor& dy, std::mt19937_64& rng) {
  std::vector<Tensor> zero;
  for (const Tensor& p : params) zero.emplace_back(p.shape, kF32);
  const Result from_zero = run_cpu(layer, params, x, dy, zero);
  std::uniform_real_distribution<double> uniform(-0.5, 0.5);
  std::vector<Tensor> before = zero;
  for (std::size_t i = 0; i < before.size(); ++i) {
    double scale = 0;
    for (const double v : from_zero.grads[i]) scale = std::max(scale, std::abs(v));
    if (scale == 0) scale = 1;
    for (std::size_t k = 0; k < static_cast<std::size_t>(before[i].numel()); ++k)
      before[i].set(k, uniform(rng) * scale);
  }
  return before;
}

void expect_results_close(const Result& gpu, const Result& cpu, const std::vector<Tensor>& before,
                          const plexus::LayerInstance& layer, const std::string& what) {
  expect_close(gpu.out, cpu.out, kOutputTol, what + "output");
  expect_close(gpu.dx, cpu.dx, kGradTol, what + "grad input");
  for (std::size_t i = 0; i < before.size(); ++i) {
    const std::vector<double> start = before[i].values();
    expect_close(minus(gpu.grads[i], start), minus(cpu.grads[i], start), kGradTol,
                 what + "gradient of " + layer.param(static_cast<uint32_t>(i)).name);
  }
}

// The layer of config `c` on the CPU and on cuda:0 over [batch, seq, d_model], compared.
void compare_layer(const std::string& name, const Config& c, int64_t batch, int64_t seq, Dt dt,
                   uint64_t seed) {
  BOOST_TEST_CONTEXT(name << ": batch " << batch << ", seq " << seq << ", options "
                          << boost::json::serialize(c.options) << ", " << c.normalization) {
    std::mt19937_64 rng(seed);
    mamba_test::Layer cpu_layer(c);
    mamba_test::Layer gpu_layer(c, kGpu);
    const std::vector<Tensor> params = mamba_test::random_params(*cpu_layer, c, kF32, rng, dt);
    const Tensor x = tt::random_tensor({batch, seq, c.d_model}, kF32, rng);
    const Tensor dy = tt::random_tensor({batch, seq, c.d_model}, kF32, rng);
    const std::vector<Tensor> before = starting_grads(*cpu_layer, params, x, dy, rng);
    const Result cpu = run_cpu(*cpu_layer, params, x, dy, before);
    const Result gpu = run_gpu(*gpu_layer, params, x, dy, before);
    expect_results_close(gpu, cpu, before, *cpu_layer, "");
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cpu_against_gpu)

BOOST_AUTO_TEST_CASE(whole_chunks_one_group) {
  compare_layer("2 chunks of 16, G = 1", config(1, 16), 2, 32, Dt::training, 11);
}

// Two heads per group: their dB and dC are summed over the group.
BOOST_AUTO_TEST_CASE(a_ragged_last_chunk_and_groups) {
  compare_layer("37 = 16 + 16 + 5, G = 2", config(2, 16), 2, 37, Dt::training, 21);
  compare_layer("45 in chunks of 16, G = H = 4, LayerNorm", config(4, 16, "LayerNorm"), 2, 45, Dt::training,
                22);
}

// dt_raw + dt_bias on both sides of softplus's threshold 20 (the even heads), with two heads per
// group (see integration.test_mamba_parity for why not G = H in float32).
BOOST_AUTO_TEST_CASE(both_softplus_branches) {
  compare_layer("40 in chunks of 12, softplus branches", config(2, 12), 2, 40, Dt::both_branches, 31);
}

BOOST_AUTO_TEST_CASE(chunks_longer_than_the_sequence_and_of_one_token) {
  compare_layer("one chunk of 64 over 20 tokens", config(2, 64), 2, 20, Dt::training, 41);
  compare_layer("chunks of 1", config(2, 1), 1, 7, Dt::training, 42);
  Config c = config(2, 10);
  c.options["mamba_num_heads"] = 6;  // d_inner = 6 * 8 = 48, not expand * d_model
  c.options["d_conv"] = 3;
  compare_layer("6 heads, d_conv 3, 23 in chunks of 10", c, 3, 23, Dt::training, 43);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(streams_and_state)

// Forward of microbatch 0, forward of 1, backward of 1, backward of 0, as a pipeline schedule
// runs them: each state keeps its own forward, and the parameter gradients accumulate both.
BOOST_AUTO_TEST_CASE(two_microbatches_interleaved) {
  const Config c = config(2, 16);
  std::mt19937_64 rng(51);
  mamba_test::Layer cpu_layer(c);
  mamba_test::Layer gpu_layer(c, kGpu);
  const std::vector<Tensor> params = mamba_test::random_params(*cpu_layer, c, kF32, rng);
  const Tensor x0 = tt::random_tensor({2, 37, c.d_model}, kF32, rng),
               dy0 = tt::random_tensor(x0.shape, kF32, rng);
  const Tensor x1 = tt::random_tensor({2, 37, c.d_model}, kF32, rng),
               dy1 = tt::random_tensor(x1.shape, kF32, rng);
  const std::vector<Tensor> before = starting_grads(*cpu_layer, params, x0, dy0, rng);

  tt::Run cpu0(*cpu_layer, {x0}, params, kF32), cpu1(*cpu_layer, {x1}, params, kF32);
  cpu0.forward();
  cpu1.forward();
  std::vector<Tensor> go1 = {dy1}, go0 = {dy0}, gi1 = {Tensor(x1.shape, kF32)},
                      gi0 = {Tensor(x0.shape, kF32)};
  std::vector<Tensor> cpu_grads = before;
  cpu1.backward(go1, gi1, cpu_grads);
  cpu0.backward(go0, gi0, cpu_grads);

  DeviceRun gpu0(*gpu_layer, tensors(upload(x0)), upload_all(params));
  DeviceRun gpu1(*gpu_layer, tensors(upload(x1)), upload_all(params));
  gpu0.forward();
  gpu1.forward();
  std::vector<plexus::Tensor> g_go1 = tensors(upload(dy1)), g_go0 = tensors(upload(dy0)),
                              g_gi1 = tensors(filled(x1.shape, std::nanf(""))),
                              g_gi0 = tensors(filled(x0.shape, std::nanf(""))),
                              gpu_grads = upload_all(before);
  gpu1.backward(g_go1, {}, g_gi1, {}, gpu_grads);
  gpu0.backward(g_go0, {}, g_gi0, {}, gpu_grads);

  expect_close(download(gpu0.outputs[0]), cpu0.outputs[0].values(), kOutputTol, "output of microbatch 0");
  expect_close(download(gpu1.outputs[0]), cpu1.outputs[0].values(), kOutputTol, "output of microbatch 1");
  expect_close(download(g_gi0[0]), gi0[0].values(), kGradTol, "grad input of microbatch 0");
  expect_close(download(g_gi1[0]), gi1[0].values(), kGradTol, "grad input of microbatch 1");
  for (std::size_t i = 0; i < before.size(); ++i) {
    const std::vector<double> start = before[i].values();
    expect_close(minus(download(gpu_grads[i]), start), minus(cpu_grads[i].values(), start), kGradTol,
                 std::string("gradient of ") + cpu_layer->param(static_cast<uint32_t>(i)).name +
                     " over both microbatches");
  }
}

// No float atomics and no device-dependent order anywhere: the same call gives the same bits,
// again and on a host stream (the engine's compute stream), so a resumed run stays bit-exact.
BOOST_AUTO_TEST_CASE(repeated_runs_are_bit_identical_on_any_stream) {
  const Config c = config(2, 16);
  std::mt19937_64 rng(61);
  mamba_test::Layer layer(c, kGpu);
  const std::vector<Tensor> params = mamba_test::random_params(*layer, c, kF32, rng);
  const Tensor x = tt::random_tensor({2, 37, c.d_model}, kF32, rng),
               dy = tt::random_tensor(x.shape, kF32, rng);
  std::vector<Tensor> before;
  for (const Tensor& p : params) before.push_back(tt::random_tensor(p.shape, kF32, rng));

  plexus::HostServices services;
  const plx_host_api* api = services.table_for("test");
  plx_stream stream = nullptr;
  BOOST_TEST_REQUIRE(api->stream_create(api->ctx, kGpu, 0, &stream) == PLX_OK);
  const Result first = run_gpu(*layer, params, x, dy, before);
  const Result again = run_gpu(*layer, params, x, dy, before);
  const Result on_stream = run_gpu(*layer, params, x, dy, before, stream, api);
  api->stream_destroy(api->ctx, stream);
  for (const Result* r : {&again, &on_stream}) {
    const std::string what = r == &again ? "again: " : "on a host stream: ";
    expect_close(r->out, first.out, 0, what + "output");
    expect_close(r->dx, first.dx, 0, what + "grad input");
    for (std::size_t i = 0; i < first.grads.size(); ++i)
      expect_close(r->grads[i], first.grads[i], 0, what + "gradient " + std::to_string(i));
  }
}

// An inference forward computes the same output and keeps nothing: a backward after it is refused.
BOOST_AUTO_TEST_CASE(an_inference_forward_keeps_nothing) {
  const Config c = config(2, 16);
  std::mt19937_64 rng(71);
  mamba_test::Layer layer(c, kGpu);
  const std::vector<Tensor> params = mamba_test::random_params(*layer, c, kF32, rng);
  const Tensor x = tt::random_tensor({2, 37, c.d_model}, kF32, rng);
  DeviceRun training(*layer, tensors(upload(x)), upload_all(params));
  DeviceRun inference(*layer, tensors(upload(x)), upload_all(params));
  training.forward(true);
  inference.forward(false);
  expect_close(download(inference.outputs[0]), download(training.outputs[0]), 0, "inference output");
  std::vector<plexus::Tensor> go = tensors(upload(tt::random_tensor(x.shape, kF32, rng))),
                              gi = tensors(filled(x.shape, 0.0f)), pg;
  for (const plexus::Tensor& p : inference.params) pg.push_back(filled(p.shape(), 0.0f));
  const std::string e = tt::error_of([&] { inference.backward(go, {}, gi, {}, pg); });
  BOOST_TEST(tt::mentions(e, "PLX_FORWARD_TRAINING"), e);
}

// The engine initializes a GPU layer's parameters in place on the device: A_log and dt_bias, drawn
// on the host from the seed alone, are the CPU layer's values bit for bit.
BOOST_AUTO_TEST_CASE(custom_initializers_fill_device_tensors) {
  const Config c = config(2, 16);
  mamba_test::Layer cpu_layer(c);
  mamba_test::Layer gpu_layer(c, kGpu);
  for (const char* name : {"mixer.A_log", "mixer.dt_bias"}) {
    const auto index = static_cast<uint32_t>(mamba_test::param_index(*cpu_layer, name));
    Tensor host({c.heads()}, kF32);
    DLTensor host_view = host.view();
    cpu_layer->init_param(index, host_view, 1234);
    plexus::Tensor device({c.heads()}, kF32, kGpu);
    DLTensor device_view = device.view();
    gpu_layer->init_param(index, device_view, 1234);
    expect_close(download(device), host.values(), 0, name);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(float64_and_bfloat16_are_refused_on_the_gpu) {
  const Config c = config(2, 16);
  std::mt19937_64 rng(81);
  mamba_test::Layer layer(c, kGpu);
  const std::vector<Tensor> params = mamba_test::random_params(*layer, c, kF32, rng);
  for (const DLDataType dtype : {plx_dtype_f64(), kBf16}) {
    const std::string name = plexus::dtype_name(dtype);
    std::string e =
        forward_error(*layer, tensors(plexus::Tensor({2, 5, c.d_model}, dtype, kGpu)), upload_all(params));
    BOOST_TEST((tt::mentions(e, "input 0") && tt::mentions(e, "expected dtype float32") &&
                tt::mentions(e, "got " + name) && tt::mentions(e, "mamba.mixer")),
               e);
    e = tt::error_of([&] { (void)layer->output_desc(tt::descs({Tensor({2, 5, c.d_model}, dtype)})); });
    BOOST_TEST((tt::mentions(e, "expected dtype float32") && tt::mentions(e, "got " + name)), e);
  }
}

BOOST_AUTO_TEST_CASE(tensors_on_another_device_are_refused) {
  const Config c = config(2, 16);
  std::mt19937_64 rng(82);
  mamba_test::Layer gpu_layer(c, kGpu);
  mamba_test::Layer cpu_layer(c);
  const std::vector<Tensor> params = mamba_test::random_params(*gpu_layer, c, kF32, rng);
  const Tensor x = tt::random_tensor({2, 5, c.d_model}, kF32, rng);

  // The input, a parameter, then (a CPU layer) a GPU input.
  std::string e = forward_error(*gpu_layer, tensors(upload(x, kCpu)), upload_all(params));
  BOOST_TEST((tt::mentions(e, "input 0") && tt::mentions(e, "cuda:0") && tt::mentions(e, "cpu:0") &&
              tt::mentions(e, "invalid argument")),
             e);

  e = forward_error(*gpu_layer, tensors(upload(x)), upload_all(params, kCpu));
  BOOST_TEST((tt::mentions(e, "norm.weight") && tt::mentions(e, "cuda:0") && tt::mentions(e, "cpu:0")), e);

  e = forward_error(*cpu_layer, tensors(upload(x)), upload_all(params, kCpu));
  BOOST_TEST((tt::mentions(e, "input 0") && tt::mentions(e, "cpu:0") && tt::mentions(e, "cuda:0")), e);

  // A gradient on the CPU, and a parameter gradient on the CPU.
  DeviceRun run(*gpu_layer, tensors(upload(x)), upload_all(params));
  run.forward();
  std::vector<plexus::Tensor> go = tensors(upload(x, kCpu)), gi = tensors(filled(x.shape, 0.0f)), pg;
  for (const plexus::Tensor& p : run.params) pg.push_back(filled(p.shape(), 0.0f));
  e = tt::error_of([&] { run.backward(go, {}, gi, {}, pg); });
  BOOST_TEST((tt::mentions(e, "grad output 0") && tt::mentions(e, "cuda:0") && tt::mentions(e, "cpu:0")), e);
  go = tensors(upload(x));
  pg[0] = upload(Tensor(std::vector<int64_t>(pg[0].shape()), kF32), kCpu);
  e = tt::error_of([&] { run.backward(go, {}, gi, {}, pg); });
  BOOST_TEST((tt::mentions(e, "gradient of parameter") && tt::mentions(e, "cpu:0")), e);
}

BOOST_AUTO_TEST_CASE(a_backward_of_another_shape_is_refused) {
  const Config c = config(2, 16);
  std::mt19937_64 rng(83);
  mamba_test::Layer layer(c, kGpu);
  DeviceRun run(*layer, tensors(upload(tt::random_tensor({2, 5, c.d_model}, kF32, rng))),
                upload_all(mamba_test::random_params(*layer, c, kF32, rng)));
  run.forward();
  std::vector<plexus::Tensor> go = tensors(filled({2, 6, c.d_model}, 0.0f)),
                              gi = tensors(filled({2, 6, c.d_model}, 0.0f)), pg;
  for (const plexus::Tensor& p : run.params) pg.push_back(filled(p.shape(), 0.0f));
  const std::string e = tt::error_of([&] { run.backward(go, {}, gi, {}, pg); });
  BOOST_TEST((tt::mentions(e, "[2, 6]") && tt::mentions(e, "[2, 5]")), e);
}

BOOST_AUTO_TEST_CASE(a_device_this_process_lacks_is_refused_at_create) {
  const int count = plexus::device::cuda_device_count();
  const std::string e = tt::error_of([&] {
    mamba_test::Layer layer(config(2, 16), DLDevice{kDLCUDA, count});
  });
  BOOST_TEST((tt::mentions(e, "unsupported") && tt::mentions(e, "cuda:" + std::to_string(count))), e);
}

BOOST_AUTO_TEST_SUITE_END()
