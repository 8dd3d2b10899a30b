// The transformer plugin's CUDA path against its CPU path: every layer is created twice from one
// model config, on the CPU and on cuda:0, given the same random float32 inputs and parameters,
// run forward (training) and backward, and its outputs, input gradients and parameter-gradient
// increments compared. Both sides compute in float32 (TF32 off on the GPU).
//
// Tolerances, |gpu - cpu| <= tol * max|cpu| over each tensor (relative to the tensor's largest
// value, because cancellation makes the relative error of small entries meaningless):
// - 0 (bitwise) for the embedding: the lookup copies and the gradient adds in token order on both.
// - 1e-5 for the final norm: a few operations per element in another order (CUDA's 1/sqrt and
//   fused multiply-adds against the CPU's), and column sums over 74 rows for the weight and bias.
// - 1e-4 for attention, MLP and the head: products with reductions of 96 to 320 terms, the
//   softmax, rotary embeddings and the activations chained on top; the reduction order differs
//   (cuBLAS against OpenBLAS), and CUDA's expf/erff against the CPU's approximations.
// Parameter gradients start from random values on both sides (they accumulate): their
// increments are compared, so overwriting instead of accumulating fails. The GPU's input
// gradients start as NaN (they are written: an element left unwritten fails).
//
// bfloat16 activations (the mixed-precision mode: bf16 activations, fp32 parameters and
// gradients) are compared against the CPU in float32 on the same inputs rounded to bf16, norm-wise
// (see compare_layer_bf16 for the tolerances and why).
//
// Without a CUDA device (or in a build without CUDA) the module reports itself skipped (77).
#define BOOST_TEST_MODULE transformer_cuda
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../unit/test_transformer_support.hpp"
#include "gpu_layer_calls.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "plexus/core/errors.hpp"
#include "plexus/core/host_services.hpp"
// Header-only (no CUDA syntax): the host-side bf16 rounding, bit for bit the device's (its include
// directory is added in tests/CMakeLists.txt; the test does not link plexus_cuda_kernels).
#include "plexus_cuda_kernels/types.hpp"
#include "skip_module.hpp"

PLEXUS_SKIP_MODULE_UNLESS(plexus::device::cuda_device_count() > 0,
                          "no CUDA GPU here (or a build without CUDA): the transformer's CUDA path needs one")

namespace {

using Tensor = tt::Tensor;
namespace ck = plexus::cuda_kernels;
// Uploads, DeviceRun, downloads and expect_close (gpu_layer_calls.hpp).
using namespace gpu_test;

// ---- device tensors in bfloat16 --------------------------------------------------------------

// A float32 host tensor rounded to bfloat16 (to nearest even, as the device rounds), on the GPU.
plexus::Tensor upload_bf16(const Tensor& t) {
  BOOST_TEST_REQUIRE(plx_dtype_equal(t.dtype, kF32));
  plexus::Tensor host(t.shape, kBf16);
  for (std::size_t i = 0; i < t.f32.size(); ++i) host.data<ck::bfloat16>()[i] = ck::to_bfloat16(t.f32[i]);
  return host.to(kGpu);
}

// The same float32 tensor with every value rounded to bfloat16 (and held in float32 again): the
// CPU reference's inputs for a bf16 run.
Tensor rounded(const Tensor& t) {
  if (!plx_dtype_equal(t.dtype, kF32)) return t;
  Tensor out = t;
  for (float& v : out.f32) v = ck::to_float(ck::to_bfloat16(v));
  return out;
}

plexus::Tensor filled(const std::vector<int64_t>& shape, float value, DLDataType dtype = kF32) {
  Tensor t(shape, kF32);
  t.fill(static_cast<double>(value));
  return plx_dtype_equal(dtype, kBf16) ? upload_bf16(t) : upload(t);
}

// ---- the comparison of one layer -------------------------------------------------------------

struct Tolerance {
  double outputs = 1e-4, grad_inputs = 1e-4, param_grads = 1e-4;
};

// Runs `name` on the CPU and on cuda:0 with the same inputs and random parameters, forward
// (training) then backward with `grad_outputs` (null_data entries: "not given"), and compares.
// Input gradients are asked for the float inputs only.
void compare_layer(const std::string& name, const tt::Model& model, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& grad_outputs, Tolerance tol, uint64_t seed) {
  BOOST_TEST_CONTEXT(name << " (" << model.normalization << ", " << model.activation << ", heads "
                          << model.num_attention_heads << ", groups " << model.num_query_groups << ")") {
    std::mt19937_64 rng(seed);
    tt::Model cpu_model = model;  // the CPU refuses the GPU-only attention_backend "flash"
    cpu_model.attention_backend = "auto";
    tt::Layer cpu_layer(name, cpu_model);
    tt::Layer gpu_layer(name, model, kDLCUDA);
    const std::vector<Tensor> params = tt::random_params(*cpu_layer, kF32, rng);
    const std::vector<Tensor> grads_before = tt::random_params(*cpu_layer, kF32, rng);

    // The CPU reference, float32.
    tt::Run cpu(*cpu_layer, inputs, params, kF32);
    cpu.forward();
    std::vector<Tensor> cpu_grad_outputs = grad_outputs, cpu_grad_inputs, cpu_param_grads = grads_before;
    std::vector<bool> absent_inputs;
    for (const Tensor& in : inputs) {
      Tensor g(in.shape, kF32);
      g.null_data = !in.is_float();
      absent_inputs.push_back(g.null_data);
      cpu_grad_inputs.push_back(std::move(g));
    }
    cpu.backward(cpu_grad_outputs, cpu_grad_inputs, cpu_param_grads);

    // The same on the GPU.
    DeviceRun gpu(*gpu_layer, upload_all(inputs), upload_all(params));
    gpu.forward();
    std::vector<plexus::Tensor> gpu_grad_outputs, gpu_grad_inputs, gpu_param_grads = upload_all(grads_before);
    std::vector<bool> absent_outputs;
    for (const Tensor& g : grad_outputs) {
      absent_outputs.push_back(g.null_data);
      gpu_grad_outputs.push_back(upload(g));  // the values of an absent one are never read
    }
    for (const Tensor& in : inputs) gpu_grad_inputs.push_back(filled(in.shape, std::nanf("")));
    gpu.backward(gpu_grad_outputs, absent_outputs, gpu_grad_inputs, absent_inputs, gpu_param_grads);

    for (std::size_t i = 0; i < cpu.outputs.size(); ++i)
      expect_close(download(gpu.outputs[i]), cpu.outputs[i].values(), tol.outputs,
                   "output " + std::to_string(i));
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (!absent_inputs[i])
        expect_close(download(gpu_grad_inputs[i]), cpu_grad_inputs[i].values(), tol.grad_inputs,
                     "grad input " + std::to_string(i));
    for (uint32_t i = 0; i < cpu_layer->info().num_params; ++i) {
      const std::vector<double> before = grads_before[i].values();
      expect_close(minus(download(gpu_param_grads[i]), before), minus(cpu_param_grads[i].values(), before),
                   tol.param_grads, std::string("gradient of ") + cpu_layer->param(i).name);
    }
  }
}

// ---- the comparison of one layer in bfloat16 -------------------------------------------------

// ||gpu - cpu||_2 <= tol * ||cpu||_2 over the tensor (exact equality when tol is 0); NaN fails.
void expect_close_normwise(const std::vector<double>& gpu, const std::vector<double>& cpu, double tol,
                           const std::string& what) {
  BOOST_TEST_REQUIRE(gpu.size() == cpu.size(),
                     what << ": " << gpu.size() << " against " << cpu.size() << " values");
  double diff2 = 0, ref2 = 0, worst = 0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    const double diff = std::abs(gpu[i] - cpu[i]);
    diff2 += diff * diff;
    ref2 += cpu[i] * cpu[i];
    if (!(diff <= worst)) {  // NaN counts as the worst
      worst = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
      worst_at = i;
    }
  }
  const double err = std::sqrt(diff2), ref = std::sqrt(ref2);
  BOOST_TEST_MESSAGE(what << ": ||gpu - cpu|| = " << err << " (" << (ref > 0 ? err / ref : err)
                          << " of ||cpu|| = " << ref << ")");
  BOOST_TEST(err <= tol * ref, what << ": ||gpu - cpu|| " << err << " > " << tol << " x ||cpu|| " << ref
                                    << " (largest difference at element " << worst_at << ": gpu "
                                    << gpu[worst_at] << " cpu " << cpu[worst_at] << ")");
}

// Each value rounded to bfloat16: the reference of an exact comparison of a bf16 tensor.
std::vector<double> rounded_values(std::vector<double> v) {
  for (double& x : v) x = static_cast<double>(ck::to_float(ck::to_bfloat16(static_cast<float>(x))));
  return v;
}

// Norm-wise relative bounds of a bf16 run against the CPU's float32 run on the same inputs rounded
// to bf16 (so both start from identical values). Why these sizes: bfloat16 keeps an 8-bit
// significand, so each stored value carries a relative rounding error of at most 2^-9 ~ 0.2% (RMS
// ~ 0.11% for random values). The GPU side rounds, beyond the shared inputs, the bf16 copies of
// the weights, every intermediate it stores (the norm's output and x-hat, qkv after RoPE, the
// probabilities, o, a and act, dS, the products' outputs) and the outputs; products accumulate in
// fp32, so the rounding errors of their terms average out instead of adding up. A chain of about
// 5 (forward) to 10 (backward) such roundings gives a norm-wise error of a few 1e-3; 2e-2 leaves
// a margin for the amplification in the softmax and norm backwards, while a wrong kernel, element
// type or a lost accumulation is off by order 1. The head's loss and logits are fp32 from bf16 h
// (the same values on both sides) and the bf16 copy of W: one rounding per factor, ~1e-3; 1e-2.
// A tolerance of 0 asks for bitwise equality, against the CPU's values rounded to bf16 where the
// GPU's tensor is bf16.
struct Bf16Tolerance {
  double activations = 2e-2;   // bf16 outputs and input gradients
  double fp32_outputs = 1e-2;  // the head's loss and logits
  double param_grads = 2e-2;   // fp32 accumulation of products of bf16 values
};

// As compare_layer, with the GPU's float inputs, outputs (the head's loss and logits excepted:
// float32) and their gradients in bfloat16, and the parameters and their gradients in float32 on
// both sides. The CPU runs in float32 on the inputs and upstream gradients rounded to bf16.
void compare_layer_bf16(const std::string& name, const tt::Model& model, const std::vector<Tensor>& inputs,
                        const std::vector<Tensor>& grad_outputs, Bf16Tolerance tol, uint64_t seed,
                        double param_scale = 0.5) {
  BOOST_TEST_CONTEXT(name << " in bfloat16 (" << model.normalization << ", " << model.activation << ", heads "
                          << model.num_attention_heads << ", groups " << model.num_query_groups
                          << ", attention " << model.attention_backend << ")") {
    std::mt19937_64 rng(seed);
    tt::Model cpu_model = model;  // the CPU refuses the GPU-only attention_backend "flash"
    cpu_model.attention_backend = "auto";
    tt::Layer cpu_layer(name, cpu_model);
    tt::Layer gpu_layer(name, model, kDLCUDA);
    const std::vector<Tensor> params = tt::random_params(*cpu_layer, kF32, rng, param_scale);
    const std::vector<Tensor> grads_before = tt::random_params(*cpu_layer, kF32, rng);
    const bool head = name == "transformer.lm_head";
    // Every output is a bf16 activation but the head's loss and logits; the embedding's dtype is
    // the output tensor's (output_desc says float32), the others' follow the input in output_desc.
    const DLDataType out_dtype = head ? kF32 : kBf16;

    // The CPU reference, float32, on the values the GPU gets.
    std::vector<Tensor> cpu_inputs, cpu_grad_outputs, cpu_grad_inputs, cpu_param_grads = grads_before;
    for (const Tensor& in : inputs) cpu_inputs.push_back(rounded(in));
    for (const Tensor& g : grad_outputs) cpu_grad_outputs.push_back(head ? g : rounded(g));
    tt::Run cpu(*cpu_layer, cpu_inputs, params, kF32);
    cpu.forward();
    std::vector<bool> absent_inputs;
    for (const Tensor& in : inputs) {
      Tensor g(in.shape, kF32);
      g.null_data = !in.is_float();
      absent_inputs.push_back(g.null_data);
      cpu_grad_inputs.push_back(std::move(g));
    }
    cpu.backward(cpu_grad_outputs, cpu_grad_inputs, cpu_param_grads);

    // The GPU in bf16.
    std::vector<plexus::Tensor> gpu_inputs;
    for (const Tensor& in : inputs) gpu_inputs.push_back(in.is_float() ? upload_bf16(in) : upload(in));
    DeviceRun gpu(*gpu_layer, std::move(gpu_inputs), upload_all(params));
    if (name == "transformer.embedding") gpu.output_dtypes = {kBf16};
    gpu.forward();
    for (const plexus::Tensor& out : gpu.outputs)
      BOOST_TEST(plx_dtype_equal(out.dtype(), out_dtype),
                 "an output of dtype " << plexus::dtype_name(out.dtype()));
    std::vector<plexus::Tensor> gpu_grad_outputs, gpu_grad_inputs, gpu_param_grads = upload_all(grads_before);
    std::vector<bool> absent_outputs;
    for (const Tensor& g : grad_outputs) {
      absent_outputs.push_back(g.null_data);
      // The head's seed (dL/dloss) is float32, like its loss; the values of an absent one are
      // never read.
      gpu_grad_outputs.push_back(head ? upload(g) : upload_bf16(g));
    }
    for (const Tensor& in : inputs) gpu_grad_inputs.push_back(filled(in.shape, std::nanf(""), kBf16));
    gpu.backward(gpu_grad_outputs, absent_outputs, gpu_grad_inputs, absent_inputs, gpu_param_grads);

    for (std::size_t i = 0; i < cpu.outputs.size(); ++i) {
      const bool bf16 = plx_dtype_equal(gpu.outputs[i].dtype(), kBf16);
      const double t = bf16 ? tol.activations : tol.fp32_outputs;
      const std::vector<double> ref = cpu.outputs[i].values();
      expect_close_normwise(download(gpu.outputs[i]), bf16 && t == 0 ? rounded_values(ref) : ref, t,
                            "output " + std::to_string(i));
    }
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (!absent_inputs[i]) {
        const std::vector<double> ref = cpu_grad_inputs[i].values();
        expect_close_normwise(download(gpu_grad_inputs[i]), tol.activations == 0 ? rounded_values(ref) : ref,
                              tol.activations, "grad input " + std::to_string(i));
      }
    for (uint32_t i = 0; i < cpu_layer->info().num_params; ++i) {
      const std::vector<double> before = grads_before[i].values();
      expect_close_normwise(minus(download(gpu_param_grads[i]), before),
                            minus(cpu_param_grads[i].values(), before), tol.param_grads,
                            std::string("gradient of ") + cpu_layer->param(i).name);
    }
  }
}

// Small sizes, some awkward for the kernels' tiling: B = 2, S = 37 (below seq_length 64),
// V = 101; C = 96 in 6 heads of 16, with 6 (MHA), 3 or 2 (GQA) or 1 kv groups; F = 160.
tt::Model model(const std::string& norm = "RMSNorm", const std::string& activation = "gelu",
                int64_t heads = 6, int64_t groups = 6) {
  tt::Model m;
  m.vocab_size = 101;
  m.hidden_size = 96;
  m.num_attention_heads = heads;
  m.num_query_groups = groups;
  m.ffn_hidden_size = 160;
  m.seq_length = 64;
  m.normalization = norm;
  m.activation = activation;
  return m;
}

constexpr int64_t kBatch = 2, kSeq = 37;

Tensor hidden(std::mt19937_64& rng) {
  return tt::random_tensor({kBatch, kSeq, 96}, kF32, rng);
}

Tensor ids(std::mt19937_64& rng, int64_t vocab, bool with_ignored) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(static_cast<std::size_t>(kBatch * kSeq));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (with_ignored && i % 5 == 2) ? -1 : pick(rng);
  v[3] = v[4] = v[11] = 7;  // repeated ids: the embedding gradient adds rows
  return Tensor::ints({kBatch, kSeq}, v);
}

// The head's backward: dL/dloss = 0.7, no gradient for the logits.
std::vector<Tensor> head_seed() {
  Tensor seed({1}, kF32);
  seed.fill(0.7);
  Tensor logits({kBatch, kSeq, 101}, kF32);
  logits.null_data = true;
  return {seed, logits};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cpu_against_gpu)

BOOST_AUTO_TEST_CASE(embedding_is_bitwise_equal) {
  std::mt19937_64 rng(1);
  const tt::Model m = model();
  compare_layer("transformer.embedding", m, {ids(rng, m.vocab_size, false)}, {hidden(rng)}, {0, 0, 0}, 11);
}

BOOST_AUTO_TEST_CASE(attention_mha_and_gqa) {
  std::mt19937_64 rng(2);
  compare_layer("transformer.attention", model("RMSNorm", "gelu", 6, 6), {hidden(rng)}, {hidden(rng)}, {},
                21);
  compare_layer("transformer.attention", model("RMSNorm", "gelu", 6, 2), {hidden(rng)}, {hidden(rng)}, {},
                22);
  compare_layer("transformer.attention", model("LayerNorm", "gelu", 6, 3), {hidden(rng)}, {hidden(rng)}, {},
                23);
  compare_layer("transformer.attention", model("LayerNorm", "gelu", 6, 1), {hidden(rng)}, {hidden(rng)}, {},
                24);
}

BOOST_AUTO_TEST_CASE(mlp_gelu_and_swiglu) {
  std::mt19937_64 rng(3);
  compare_layer("transformer.mlp", model("RMSNorm", "gelu"), {hidden(rng)}, {hidden(rng)}, {}, 31);
  compare_layer("transformer.mlp", model("LayerNorm", "gelu"), {hidden(rng)}, {hidden(rng)}, {}, 32);
  compare_layer("transformer.mlp", model("RMSNorm", "swiglu"), {hidden(rng)}, {hidden(rng)}, {}, 33);
  compare_layer("transformer.mlp", model("LayerNorm", "swiglu"), {hidden(rng)}, {hidden(rng)}, {}, 34);
}

BOOST_AUTO_TEST_CASE(final_norm_rms_and_layer) {
  std::mt19937_64 rng(4);
  const Tolerance tol{1e-5, 1e-5, 1e-5};
  compare_layer("transformer.norm", model("RMSNorm"), {hidden(rng)}, {hidden(rng)}, tol, 41);
  compare_layer("transformer.norm", model("LayerNorm"), {hidden(rng)}, {hidden(rng)}, tol, 42);
}

BOOST_AUTO_TEST_CASE(lm_head_tied_and_untied_with_ignored_targets) {
  std::mt19937_64 rng(5);
  tt::Model m = model();
  compare_layer("transformer.lm_head", m, {hidden(rng), ids(rng, m.vocab_size, true)}, head_seed(), {}, 51);
  m.untie_embeddings_and_output_weights = true;
  compare_layer("transformer.lm_head", m, {hidden(rng), ids(rng, m.vocab_size, true)}, head_seed(), {}, 52);
  // Every target ignored: the loss is the constant 0, dh is 0 and the weight gradient unchanged.
  const Tensor none = Tensor::ints({kBatch, kSeq}, std::vector<int32_t>(kBatch * kSeq, -1));
  compare_layer("transformer.lm_head", m, {hidden(rng), none}, head_seed(), {}, 53);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(bf16_against_cpu_f32)

// Bitwise: the lookup is the CPU's value rounded once to bf16, and the gradient adds the same
// (bf16-valued) upstream rows in token order in fp32 on both sides.
BOOST_AUTO_TEST_CASE(embedding_is_the_rounded_lookup) {
  std::mt19937_64 rng(61);
  const tt::Model m = model();
  compare_layer_bf16("transformer.embedding", m, {ids(rng, m.vocab_size, false)}, {hidden(rng)}, {0, 0, 0},
                     611);
}

// The parameters are drawn with standard deviation 0.35 here, not the 0.5 of the other layers.
// With weights of std s, the normalized input times the norm's weight has std s per element, q
// and k have std sqrt(C) s^2 and the attention logits q.k / sqrt(d) have std sqrt(d) (sqrt(C)
// s^2)^2 / sqrt(d) = C s^4: 6.0 for s = 0.5 (C = 96), 1.4 for s = 0.35. At a logit spread of 6
// every row's softmax is nearly one-hot, and its backward, P * (dP - rowsum(dO * O)), is a
// difference of nearly equal numbers, so the bf16 roundings of P, dS and O (which every bf16
// attention, flash attention's included, makes) grow to a few percent of the gradients' norm:
// measured on an H100, 2.1-3.7% with s = 0.5 against 0.2-0.4% for the other layers. A logit
// spread of about 1 is the regime a trained model's attention works in; a wrong index, a lost
// term or a wrong element type is off by order 1 in either regime.
BOOST_AUTO_TEST_CASE(attention_mha_and_gqa) {
  std::mt19937_64 rng(62);
  constexpr double kAttentionParamScale = 0.35;
  compare_layer_bf16("transformer.attention", model("RMSNorm", "gelu", 6, 6), {hidden(rng)}, {hidden(rng)},
                     {}, 621, kAttentionParamScale);
  compare_layer_bf16("transformer.attention", model("RMSNorm", "gelu", 6, 2), {hidden(rng)}, {hidden(rng)},
                     {}, 622, kAttentionParamScale);
  compare_layer_bf16("transformer.attention", model("LayerNorm", "gelu", 6, 3), {hidden(rng)}, {hidden(rng)},
                     {}, 623, kAttentionParamScale);
  compare_layer_bf16("transformer.attention", model("LayerNorm", "gelu", 6, 1), {hidden(rng)}, {hidden(rng)},
                     {}, 624, kAttentionParamScale);
}

// The fused (flash) kernel at the head dimensions it serves, 64 and 128, with grouped query heads,
// against the CPU in float32, and the unfused kernels on the same layers: the same tolerances (the
// flash kernel rounds P once before its normalization instead of after it, the same size of
// error). S = 37 and 100 leave partial tiles of 64 keys and 32 queries. Parameters drawn with
// std 0.2: logits spread C s^4 = 0.2 (C = 128) and 0.4 (C = 256), a trained model's regime (see
// above).
BOOST_AUTO_TEST_CASE(attention_flash_and_unfused_at_head_dims_64_and_128) {
  std::mt19937_64 rng(64);
  constexpr double kParamScale = 0.2;
  struct Case {
    int64_t hidden, heads, groups, seq;
  };
  for (const Case c : {Case{128, 2, 1, 37}, Case{256, 2, 2, 100}, Case{256, 4, 2, 37}}) {
    for (const char* backend : {"flash", "unfused"}) {
      tt::Model m = model("RMSNorm", "gelu", c.heads, c.groups);
      m.hidden_size = c.hidden;
      m.ffn_hidden_size = 2 * c.hidden;
      m.seq_length = 128;
      m.attention_backend = backend;
      const Tensor x = tt::random_tensor({kBatch, c.seq, c.hidden}, kF32, rng);
      const Tensor dy = tt::random_tensor({kBatch, c.seq, c.hidden}, kF32, rng);
      compare_layer_bf16("transformer.attention", m, {x}, {dy}, {}, 641, kParamScale);
    }
  }
}

BOOST_AUTO_TEST_CASE(mlp_gelu_and_swiglu) {
  std::mt19937_64 rng(63);
  compare_layer_bf16("transformer.mlp", model("RMSNorm", "gelu"), {hidden(rng)}, {hidden(rng)}, {}, 631);
  compare_layer_bf16("transformer.mlp", model("LayerNorm", "gelu"), {hidden(rng)}, {hidden(rng)}, {}, 632);
  compare_layer_bf16("transformer.mlp", model("RMSNorm", "swiglu"), {hidden(rng)}, {hidden(rng)}, {}, 633);
  compare_layer_bf16("transformer.mlp", model("LayerNorm", "swiglu"), {hidden(rng)}, {hidden(rng)}, {}, 634);
}

BOOST_AUTO_TEST_CASE(final_norm_rms_and_layer) {
  std::mt19937_64 rng(64);
  compare_layer_bf16("transformer.norm", model("RMSNorm"), {hidden(rng)}, {hidden(rng)}, {}, 641);
  compare_layer_bf16("transformer.norm", model("LayerNorm"), {hidden(rng)}, {hidden(rng)}, {}, 642);
}

// Loss and logits float32 (output_desc says so for a bf16 input), dh bf16, dW float32.
BOOST_AUTO_TEST_CASE(lm_head_tied_and_untied_with_ignored_targets) {
  std::mt19937_64 rng(65);
  tt::Model m = model();
  compare_layer_bf16("transformer.lm_head", m, {hidden(rng), ids(rng, m.vocab_size, true)}, head_seed(), {},
                     651);
  m.untie_embeddings_and_output_weights = true;
  compare_layer_bf16("transformer.lm_head", m, {hidden(rng), ids(rng, m.vocab_size, true)}, head_seed(), {},
                     652);
  // Every target ignored: loss 0, dh 0 and the weight gradient unchanged (norm-wise against 0:
  // exactly).
  const Tensor none = Tensor::ints({kBatch, kSeq}, std::vector<int32_t>(kBatch * kSeq, -1));
  compare_layer_bf16("transformer.lm_head", m, {hidden(rng), none}, head_seed(), {}, 653);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(streams_and_state)

// A host stream (not the default one) gives the same results bit for bit; backward runs twice on
// one forward's state and the parameter gradients accumulate twice.
BOOST_AUTO_TEST_CASE(a_host_stream_and_a_repeated_backward) {
  std::mt19937_64 rng(6);
  const tt::Model m = model("LayerNorm", "swiglu", 6, 2);
  tt::Layer layer("transformer.attention", m, kDLCUDA);
  const std::vector<Tensor> params = tt::random_params(*layer, kF32, rng);
  const Tensor x = hidden(rng), dy = hidden(rng);

  plexus::HostServices services;
  const plx_host_api* api = services.table_for("test");
  plx_stream stream = nullptr;
  BOOST_TEST_REQUIRE(api->stream_create(api->ctx, kGpu, 0, &stream) == PLX_OK);

  std::vector<std::vector<double>> results[2];
  for (int on_stream = 0; on_stream < 2; ++on_stream) {
    DeviceRun run(*layer, tensors(upload(x)), upload_all(params));
    run.stream = on_stream ? stream : nullptr;
    run.forward();
    std::vector<plexus::Tensor> go = tensors(upload(dy)), gi = tensors(filled(x.shape, 0.0f));
    std::vector<plexus::Tensor> pg;
    for (const plexus::Tensor& p : run.params) pg.push_back(filled(p.shape(), 0.0f));
    run.backward(go, {}, gi, {}, pg);
    // Copies synchronize with the default stream only: wait for the host stream first.
    BOOST_TEST_REQUIRE(api->stream_synchronize(api->ctx, stream) == PLX_OK);
    const std::vector<double> once = download(pg[0]);
    run.backward(go, {}, gi, {}, pg);  // the same state again: the gradients add up once more
    BOOST_TEST_REQUIRE(api->stream_synchronize(api->ctx, stream) == PLX_OK);
    auto& r = results[on_stream];
    r.push_back(download(run.outputs[0]));
    r.push_back(download(gi[0]));
    for (const plexus::Tensor& g : pg) r.push_back(download(g));
    std::vector<double> twice = once;
    for (double& v : twice) v *= 2;
    expect_close(download(pg[0]), twice, 1e-6, "norm weight gradient after two backwards");
  }
  for (std::size_t i = 0; i < results[0].size(); ++i)
    expect_close(results[1][i], results[0][i], 0, "stream run, tensor " + std::to_string(i));
  api->stream_destroy(api->ctx, stream);
}

BOOST_AUTO_TEST_CASE(backward_needs_a_training_forward) {
  std::mt19937_64 rng(7);
  tt::Layer layer("transformer.mlp", model(), kDLCUDA);
  DeviceRun run(*layer, tensors(upload(hidden(rng))), upload_all(tt::random_params(*layer, kF32, rng)));
  run.forward(false);
  std::vector<plexus::Tensor> go = tensors(upload(hidden(rng))),
                              gi = tensors(filled({kBatch, kSeq, 96}, 0.0f)), pg;
  for (const plexus::Tensor& p : run.params) pg.push_back(filled(p.shape(), 0.0f));
  const std::string e = tt::error_of([&] { run.backward(go, {}, gi, {}, pg); });
  BOOST_TEST(tt::mentions(e, "PLX_FORWARD_TRAINING"), e);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(tensors_on_another_device_are_refused) {
  std::mt19937_64 rng(8);
  const tt::Model m = model();
  tt::Layer gpu_layer("transformer.attention", m, kDLCUDA);
  tt::Layer cpu_layer("transformer.attention", m);
  const std::vector<Tensor> params = tt::random_params(*gpu_layer, kF32, rng);
  const Tensor x = hidden(rng);

  // A CUDA layer given a CPU input.
  std::string e = forward_error(*gpu_layer, tensors(upload(x, kCpu)), upload_all(params));
  BOOST_TEST((tt::mentions(e, "input 0") && tt::mentions(e, "cuda:0") && tt::mentions(e, "cpu:0") &&
              tt::mentions(e, "invalid argument")),
             e);

  // A CUDA layer given CPU parameters.
  e = forward_error(*gpu_layer, tensors(upload(x)), upload_all(params, kCpu));
  BOOST_TEST(
      (tt::mentions(e, "input_layernorm.weight") && tt::mentions(e, "cuda:0") && tt::mentions(e, "cpu:0")),
      e);

  // A CPU layer given a GPU input.
  e = forward_error(*cpu_layer, tensors(upload(x)), upload_all(params, kCpu));
  BOOST_TEST((tt::mentions(e, "input 0") && tt::mentions(e, "cuda:0") && tt::mentions(e, "cpu:0")), e);

  // A CUDA layer given a gradient on the CPU.
  DeviceRun run(*gpu_layer, tensors(upload(x)), upload_all(params));
  run.forward();
  std::vector<plexus::Tensor> go = tensors(upload(hidden(rng), kCpu)), gi = tensors(filled(x.shape, 0.0f)),
                              pg;
  for (const plexus::Tensor& p : run.params) pg.push_back(filled(p.shape(), 0.0f));
  e = tt::error_of([&] { run.backward(go, {}, gi, {}, pg); });
  BOOST_TEST((tt::mentions(e, "grad output 0") && tt::mentions(e, "cuda:0")), e);
}

BOOST_AUTO_TEST_CASE(float64_and_bad_ids_are_refused_on_the_gpu) {
  std::mt19937_64 rng(9);
  const tt::Model m = model();

  // float64 activations: the CUDA path is float32 or bfloat16.
  tt::Layer norm("transformer.norm", m, kDLCUDA);
  std::string e = tt::error_of([&] {
    plexus::Tensor x({kBatch, kSeq, 96}, plx_dtype_f64(), kGpu);
    DeviceRun run(*norm, tensors(std::move(x)), tensors(plexus::Tensor({96}, plx_dtype_f64(), kGpu)));
    run.forward();
  });
  BOOST_TEST((tt::mentions(e, "input 0") && tt::mentions(e, "float32 or bfloat16") &&
              tt::mentions(e, "got float64")),
             e);

  // A token id out of range, named with its position as on the CPU.
  tt::Layer emb("transformer.embedding", m, kDLCUDA);
  Tensor tokens = ids(rng, m.vocab_size, false);
  tokens.i32[40] = 101;  // [1, 3]
  e = tt::error_of([&] {
    DeviceRun run(*emb, tensors(upload(tokens)), upload_all(tt::random_params(*emb, kF32, rng)));
    run.forward();
  });
  BOOST_TEST(
      (tt::mentions(e, "token id 101") && tt::mentions(e, "[1, 3]") && tt::mentions(e, "vocab_size 101")), e);

  // A target out of range (-1 is allowed, -2 is not).
  tt::Layer head("transformer.lm_head", m, kDLCUDA);
  Tensor targets = ids(rng, m.vocab_size, true);
  targets.i32[5] = -2;  // [0, 5]
  e = tt::error_of([&] {
    DeviceRun run(*head, tensors(upload(hidden(rng)), upload(targets)),
                  upload_all(tt::random_params(*head, kF32, rng)));
    run.forward();
  });
  BOOST_TEST((tt::mentions(e, "target -2") && tt::mentions(e, "[0, 5]") && tt::mentions(e, "vocab_size 101")),
             e);
}

namespace {

// A bfloat16 training forward of the head, then its backward with grad input 0 and the weight
// gradients in the dtypes given: the error that backward raises.
std::string head_backward_error(std::mt19937_64& rng, const tt::Model& m, const Tensor& x,
                                DLDataType grad_input, DLDataType grad_weight) {
  tt::Layer head("transformer.lm_head", m, kDLCUDA);
  DeviceRun run(*head, tensors(upload_bf16(x), upload(ids(rng, m.vocab_size, true))),
                upload_all(tt::random_params(*head, kF32, rng)));
  run.forward();
  std::vector<plexus::Tensor> go = upload_all(head_seed()),
                              gi = tensors(filled(x.shape, 0.0f, grad_input), filled({kBatch, kSeq}, 0.0f)),
                              pg;
  for (const plexus::Tensor& p : run.params) pg.push_back(filled(p.shape(), 0.0f, grad_weight));
  return tt::error_of([&] { run.backward(go, {false, true}, gi, {false, true}, pg); });
}

}  // namespace

// A backward in another activation dtype than its forward (whose state keeps its tensors in its
// own dtype) is refused, naming both.
BOOST_AUTO_TEST_CASE(a_backward_in_another_dtype_than_its_forward_is_refused) {
  std::mt19937_64 rng(12);
  const tt::Model m = model();
  const Tensor x = hidden(rng), dy = hidden(rng);
  for (const char* name : {"transformer.attention", "transformer.mlp", "transformer.norm"}) {
    BOOST_TEST_CONTEXT(name) {
      tt::Layer layer(name, m, kDLCUDA);
      const std::vector<Tensor> params = tt::random_params(*layer, kF32, rng);
      for (const bool forward_bf16 : {true, false}) {
        const DLDataType fwd = forward_bf16 ? kBf16 : kF32, bwd = forward_bf16 ? kF32 : kBf16;
        DeviceRun run(*layer, tensors(forward_bf16 ? upload_bf16(x) : upload(x)), upload_all(params));
        run.forward();
        std::vector<plexus::Tensor> go = tensors(plx_dtype_equal(bwd, kBf16) ? upload_bf16(dy) : upload(dy)),
                                    gi = tensors(filled(x.shape, 0.0f, bwd)), pg;
        for (const plexus::Tensor& p : run.params) pg.push_back(filled(p.shape(), 0.0f));
        const std::string e = tt::error_of([&] { run.backward(go, {}, gi, {}, pg); });
        BOOST_TEST(tt::mentions(e, "backward in " + plexus::dtype_name(bwd) + " after a forward in " +
                                       plexus::dtype_name(fwd)),
                   e);
      }
    }
  }

  // The head: its backward is seeded by the float32 loss; a grad input 0 in float32 after a
  // bfloat16 forward is the mismatch.
  const std::string e = head_backward_error(rng, m, x, kF32, kF32);
  BOOST_TEST(tt::mentions(e, "backward in float32 after a forward in bfloat16"), e);
}

// Within one call: activations of two dtypes, or parameters in bfloat16 (they are float32 in
// either mode), are refused naming the tensor and both dtypes. A CPU layer refuses bfloat16
// activations naming the tensor, though its output_desc accepts them.
BOOST_AUTO_TEST_CASE(mixed_dtypes_are_refused) {
  std::mt19937_64 rng(13);
  const tt::Model m = model();
  tt::Layer att("transformer.attention", m, kDLCUDA);
  const std::vector<Tensor> params = tt::random_params(*att, kF32, rng);
  const Tensor x = hidden(rng);

  // bfloat16 input, float32 output.
  std::string e = tt::error_of([&] {
    DeviceRun run(*att, tensors(upload_bf16(x)), upload_all(params));
    run.output_dtypes = {kF32};
    run.forward();
  });
  BOOST_TEST((tt::mentions(e, "output 0") && tt::mentions(e, "bfloat16") && tt::mentions(e, "float32")), e);

  // bfloat16 parameters.
  e = tt::error_of([&] {
    std::vector<plexus::Tensor> p16;
    for (const Tensor& p : params) p16.push_back(upload_bf16(p));
    DeviceRun run(*att, tensors(upload_bf16(x)), std::move(p16));
    run.forward();
  });
  BOOST_TEST((tt::mentions(e, "input_layernorm.weight") && tt::mentions(e, "expected dtype float32") &&
              tt::mentions(e, "bfloat16")),
             e);

  // The head's bfloat16 input, float32 upstream gradient (the forward's), bfloat16 weight gradient.
  e = head_backward_error(rng, m, x, kBf16, kBf16);
  BOOST_TEST((tt::mentions(e, "gradient of parameter") && tt::mentions(e, "expected dtype float32") &&
              tt::mentions(e, "bfloat16")),
             e);

  // A CPU layer: output_desc follows a bfloat16 input (the head: float32 loss and logits), and
  // forward refuses it naming input 0.
  tt::Layer cpu_att("transformer.attention", m), cpu_head("transformer.lm_head", m);
  const std::vector<plx_tensor_desc> att_out =
      cpu_att->output_desc(tt::descs({Tensor({kBatch, kSeq, 96}, kBf16)}));
  BOOST_TEST(plx_dtype_equal(att_out.at(0).dtype, kBf16));
  const std::vector<plx_tensor_desc> head_out = cpu_head->output_desc(
      tt::descs({Tensor({kBatch, kSeq, 96}, kBf16), Tensor({kBatch, kSeq}, plx_dtype_i32())}));
  BOOST_TEST_REQUIRE(head_out.size() == 2u);
  BOOST_TEST((plx_dtype_equal(head_out[0].dtype, kF32) && plx_dtype_equal(head_out[1].dtype, kF32)));
  e = tt::error_of([&] {
    plexus::Tensor cpu_x({kBatch, kSeq, 96}, kBf16);
    DeviceRun cpu_run(*cpu_att, tensors(std::move(cpu_x)), upload_all(params, kCpu));
    cpu_run.forward();
  });
  BOOST_TEST((tt::mentions(e, "input 0 (hidden states)") && tt::mentions(e, "bfloat16")), e);
}

// Flash asked for where the kernel does not serve the run (float32 activations, head dimension 16)
// is refused with the key's name; the CPU refuses it when the layer is created.
BOOST_AUTO_TEST_CASE(attention_flash_refused_where_not_served) {
  std::mt19937_64 rng(65);
  tt::Model m = model();
  m.attention_backend = "flash";
  tt::Layer gpu_layer("transformer.attention", m, kDLCUDA);
  const std::vector<Tensor> params = tt::random_params(*gpu_layer, kF32, rng, 0.5);
  std::vector<plexus::Tensor> inputs;
  inputs.push_back(upload(hidden(rng)));
  DeviceRun gpu(*gpu_layer, std::move(inputs), upload_all(params));
  BOOST_CHECK_EXCEPTION(gpu.forward(), std::exception, [](const std::exception& e) {
    return std::string(e.what()).find("attention_backend") != std::string::npos;
  });
  BOOST_CHECK_EXCEPTION(tt::Layer("transformer.attention", m), std::exception, [](const std::exception& e) {
    return std::string(e.what()).find("attention_backend") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(a_device_this_process_lacks_is_refused_at_create) {
  const tt::Model m = model();
  const std::string e = tt::error_of([&] {
    plexus::ConfigHandle config{boost::json::object{}, "model.layer.options"};
    plexus::ConfigHandle model_config(m.json(), "model");
    plx_layer_create_args args{};
    args.struct_size = sizeof(args);
    args.num_layers = 2;
    args.device = DLDevice{kDLCUDA, plexus::device::cuda_device_count()};  // one past the last
    args.config = config.get();
    args.model_config = model_config.get();
    plexus::LayerInstance layer(tt::component("transformer.mlp"), args);
  });
  BOOST_TEST((tt::mentions(e, "unsupported") && tt::mentions(e, "cuda:")), e);
}

BOOST_AUTO_TEST_SUITE_END()
