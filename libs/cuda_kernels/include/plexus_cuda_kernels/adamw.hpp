// plexus_cuda_kernels: the AdamW update of the engine (framework/src/engine/adamw.cpp) on the GPU,
// with its exact operation order in fp32: each operation is an explicitly rounded IEEE operation
// (no fused multiply-add), so given the same scalars the GPU update equals the CPU's bit for bit.
//
//   g' = g * clip
//   w -= decay * w
//   m  = beta1 * m + (1 - beta1) * g'
//   v  = beta2 * v + (1 - beta2) * g' * g'
//   w -= step_size * m / (sqrt(v) * inv_sqrt_c2 + eps)
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

namespace plexus::cuda_kernels {

// The per-parameter fp32 scalars of one step, rounded from double exactly as the CPU optimizer
// rounds them.
struct AdamWScalars {
  float decay = 0;  // lr * weight_decay, or 0 for parameters without weight decay
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float step_size = 0;    // lr / (1 - beta1^(step + 1))
  float inv_sqrt_c2 = 1;  // 1 / sqrt(1 - beta2^(step + 1))
  float eps = 1e-8f;
  float clip = 1;  // the clipping factor (used when no device factor is given)

  // `step` is 0-based (the bias correction uses step + 1); `lr` is the step's learning rate.
  static AdamWScalars make(double lr, double weight_decay, bool decays, double beta1, double beta2,
                           double eps, int64_t step, double clip = 1.0) {
    const double correction1 = 1.0 - std::pow(beta1, static_cast<double>(step + 1));
    const double correction2 = 1.0 - std::pow(beta2, static_cast<double>(step + 1));
    AdamWScalars s;
    s.decay = static_cast<float>(decays ? lr * weight_decay : 0.0);
    s.beta1 = static_cast<float>(beta1);
    s.beta2 = static_cast<float>(beta2);
    s.step_size = static_cast<float>(lr / correction1);
    s.inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(correction2));
    s.eps = static_cast<float>(eps);
    s.clip = static_cast<float>(clip);
    return s;
  }
};

// The clipping factor of the CPU optimizer, on the device in double from the device sum of squares
// (e.g. sum_squares over every gradient): norm = sqrt(sum); factor = clip_grad / (norm + 1e-6)
// when clip_grad > 0 and norm > clip_grad, else 1, rounded to fp32. `norm` may be null.
void clip_factor(const double* sum_of_squares, double clip_grad, float* factor, double* norm,
                 cudaStream_t stream);

// One AdamW step over n elements: w (parameters), g (gradients), m and v (moments), all fp32.
// clip: a device factor (e.g. from clip_factor), or null to use scalars.clip.
void adamw_step(int64_t n, float* w, const float* g, float* m, float* v, const AdamWScalars& scalars,
                const float* clip, cudaStream_t stream);

}  // namespace plexus::cuda_kernels
