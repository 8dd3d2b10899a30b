// Shared by the GPU tests of layer plugins (test_transformer_cuda.cpp, test_mamba_cuda.cpp,
// test_moe_cuda.cpp): host tensors of the unit tests' support header (tt::Tensor) uploaded as
// plexus::Tensors, one run of a layer over device tensors on any stream, stage by stage where it
// has several (DeviceRun), values read back, and the elementwise comparison relative to a
// tensor's largest value.
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../unit/test_transformer_support.hpp"
#include "plexus/core/engine/tensor.hpp"
// Header-only (no CUDA syntax): bf16 values widened on the host (the tests' include directories
// name libs/cuda_kernels/include; they do not link plexus_cuda_kernels).
#include "plexus_cuda_kernels/types.hpp"

namespace gpu_test {

inline const DLDataType kF32 = plx_dtype_f32();
inline const DLDataType kBf16 = plx_dtype_bf16();
inline const DLDevice kGpu{kDLCUDA, 0};
inline const DLDevice kCpu{kDLCPU, 0};

// ---- device tensors ------------------------------------------------------------------------

// A float32 or int32 host tensor of the support header, as a plexus::Tensor on `device`.
inline plexus::Tensor upload(const tt::Tensor& t, DLDevice device = kGpu) {
  plexus::Tensor host(t.shape, t.dtype);
  if (plx_dtype_equal(t.dtype, kF32))
    std::memcpy(host.raw(), t.f32.data(), host.bytes());
  else if (plx_dtype_equal(t.dtype, plx_dtype_i32()))
    std::memcpy(host.raw(), t.i32.data(), host.bytes());
  else
    BOOST_FAIL("upload: only float32 and int32 tensors");
  if (device.device_type == kDLCPU) return host;
  return host.to(device);
}

// plexus::Tensor is move-only, so no initializer lists of them.
template <class... Ts>
std::vector<plexus::Tensor> tensors(Ts&&... ts) {
  std::vector<plexus::Tensor> out;
  (out.push_back(std::forward<Ts>(ts)), ...);
  return out;
}

// float32 or bfloat16 (widened exactly) values.
inline std::vector<double> download(const plexus::Tensor& t) {
  const plexus::Tensor host = t.to(kCpu);
  const bool bf16 = plx_dtype_equal(host.dtype(), kBf16);
  BOOST_TEST_REQUIRE((bf16 || plx_dtype_equal(host.dtype(), kF32)));
  std::vector<double> out(static_cast<std::size_t>(host.numel()));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<double>(
        bf16 ? plexus::cuda_kernels::to_float(host.data<plexus::cuda_kernels::bfloat16>()[i])
             : host.data<float>()[i]);
  return out;
}

inline plx_tensor_desc desc_of(const plexus::Tensor& t) {
  plx_tensor_desc d{};
  d.ndim = static_cast<uint32_t>(t.shape().size());
  d.dtype = t.dtype();
  for (uint32_t i = 0; i < d.ndim; ++i) d.dims[i] = t.shape()[i];
  return d;
}

// Views for a call; entries marked absent get data == NULL ("not needed").
inline std::vector<DLTensor> views(const std::vector<plexus::Tensor>& ts,
                                   const std::vector<bool>& absent = {}) {
  std::vector<DLTensor> out;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    out.push_back(ts[i].view());
    if (i < absent.size() && absent[i]) out.back().data = nullptr;
  }
  return out;
}

// One run of a layer over plexus::Tensors (on the GPU, or wherever the caller put them).
struct DeviceRun {
  const plexus::LayerInstance& layer;
  std::vector<plexus::Tensor> inputs, params, outputs;
  plx_stream stream = nullptr;  // NULL: the default stream
  // Output dtypes in place of output_desc's where not empty, as the engine allocates the
  // embedding's output in its activation dtype (output_desc says float32).
  std::vector<DLDataType> output_dtypes;
  std::unique_ptr<plexus::LayerInstance::State> state;

  DeviceRun(const plexus::LayerInstance& l, std::vector<plexus::Tensor> in, std::vector<plexus::Tensor> p)
      : layer(l), inputs(std::move(in)), params(std::move(p)) {}

  // Stage 0 (the one stage of the transformer's and mamba's layers): allocates the outputs and a
  // fresh state, then runs it.
  std::vector<plexus::Tensor>& forward(bool training = true) {
    forward_stage(0, training);
    return outputs;
  }

  // One forward stage, for a layer of several (moe.layer): stage 0 allocates the outputs and a
  // fresh state; the others run on that state, in order.
  void forward_stage(uint32_t stage, bool training = true) {
    if (stage == 0) {
      std::vector<plx_tensor_desc> descs;
      for (const plexus::Tensor& t : inputs) descs.push_back(desc_of(t));
      outputs.clear();
      for (const plx_tensor_desc& d : layer.output_desc(descs)) {
        const std::size_t i = outputs.size();
        outputs.emplace_back(std::vector<int64_t>(d.dims, d.dims + d.ndim),
                             i < output_dtypes.size() ? output_dtypes[i] : d.dtype, kGpu);
      }
      state = layer.create_state(0);
    }
    std::vector<DLTensor> in = views(inputs), out = views(outputs), par = views(params);
    plx_forward_args args = tt::forward_args(in, out, par, training ? PLX_FORWARD_TRAINING : 0u);
    args.compute_stream = stream;
    layer.forward(*state, stage, args);
  }

  // Every forward stage in order.
  void forward_all_stages() {
    for (uint32_t stage = 0; stage < layer.info().num_stages; ++stage) forward_stage(stage);
  }

  void backward(const std::vector<plexus::Tensor>& grad_outputs, const std::vector<bool>& absent_grad_outputs,
                std::vector<plexus::Tensor>& grad_inputs, const std::vector<bool>& absent_grad_inputs,
                std::vector<plexus::Tensor>& param_grads) {
    backward_stage(0, grad_outputs, absent_grad_outputs, grad_inputs, absent_grad_inputs, param_grads);
  }

  // One backward stage on the state of the last forward (a layer of several runs them in reverse);
  // loss_scale as tt::backward_args (0 reads as 1).
  void backward_stage(uint32_t stage, const std::vector<plexus::Tensor>& grad_outputs,
                      const std::vector<bool>& absent_grad_outputs, std::vector<plexus::Tensor>& grad_inputs,
                      const std::vector<bool>& absent_grad_inputs, std::vector<plexus::Tensor>& param_grads,
                      double loss_scale = 0.0) {
    std::vector<DLTensor> go = views(grad_outputs, absent_grad_outputs),
                          gi = views(grad_inputs, absent_grad_inputs), par = views(params),
                          pg = views(param_grads);
    plx_backward_args args = tt::backward_args(go, gi, par, pg, loss_scale);
    args.compute_stream = stream;
    layer.backward(*state, stage, args);
  }

  // Every backward stage in reverse, every gradient present.
  void backward_all_stages(const std::vector<plexus::Tensor>& grad_outputs,
                           std::vector<plexus::Tensor>& grad_inputs, std::vector<plexus::Tensor>& param_grads,
                           double loss_scale = 0.0) {
    for (uint32_t stage = layer.info().num_stages; stage-- > 0;)
      backward_stage(stage, grad_outputs, {}, grad_inputs, {}, param_grads, loss_scale);
  }
};

// The error a training forward of `layer` over these tensors raises (a test failure if none).
inline std::string forward_error(const plexus::LayerInstance& layer, std::vector<plexus::Tensor> inputs,
                                 std::vector<plexus::Tensor> params) {
  return tt::error_of([&] {
    DeviceRun run(layer, std::move(inputs), std::move(params));
    run.forward();
  });
}

inline std::vector<plexus::Tensor> upload_all(const std::vector<tt::Tensor>& ts, DLDevice device = kGpu) {
  std::vector<plexus::Tensor> out;
  for (const tt::Tensor& t : ts) out.push_back(upload(t, device));
  return out;
}

// ---- comparisons ---------------------------------------------------------------------------

// |gpu - cpu| <= tol * max|cpu| elementwise (exact equality when tol is 0).
inline void expect_close(const std::vector<double>& gpu, const std::vector<double>& cpu, double tol,
                         const std::string& what) {
  BOOST_TEST_REQUIRE(gpu.size() == cpu.size(),
                     what << ": " << gpu.size() << " against " << cpu.size() << " values");
  double scale = 0, worst = 0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    scale = std::max(scale, std::abs(cpu[i]));
    const double diff = std::abs(gpu[i] - cpu[i]);
    if (!(diff <= worst)) {  // NaN counts as the worst
      worst = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
      worst_at = i;
    }
  }
  BOOST_TEST_MESSAGE(what << ": max |gpu - cpu| = " << worst << " (" << (scale > 0 ? worst / scale : worst)
                          << " of max |cpu| = " << scale << ")");
  BOOST_TEST(worst <= tol * scale, what << ": element " << worst_at << " gpu " << gpu[worst_at] << " cpu "
                                        << cpu[worst_at] << ", |diff| " << worst << " > " << tol << " x "
                                        << scale);
}

inline std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] - b[i];
  return out;
}

}  // namespace gpu_test
