// The output gate and grouped RMSNorm, forward and backward (kernels.hpp; gated_norm.hpp has the
// formulas, gated_norm.cpp the CPU's loops, which these follow term for term):
//   g = y silu(z);  r = 1 / sqrt(mean over the group of g^2 + eps);  o = g r w.
// One block of kRowThreads per (row, group): its threads stride over the group's channels and
// reduce with block_sum.
#include "cuda/device.cuh"
#include "cuda/kernels.hpp"

namespace plexus::mamba::cuda {
namespace {

__global__ void forward_kernel(int64_t groups, int64_t width, float eps, const float* y, const float* z,
                               int64_t ld_z, const float* w, const float* rstd_in, float* o,
                               float* rstd_out) {
  const int64_t r = blockIdx.x / groups, g = blockIdx.x % groups;
  const int64_t n = width / groups, c0 = g * n;
  const float* yr = y + r * width + c0;
  const float* zr = z + r * ld_z + c0;
  float* orow = o + r * width + c0;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < n; c += kRowThreads) {
    const float gv = yr[c] * zr[c] * sigmoid(zr[c]);
    orow[c] = gv;  // read back below by this same thread
    sum += gv * gv;
  }
  float rs;
  if (rstd_in != nullptr) {
    rs = rstd_in[r * groups + g];
  } else {
    rs = 1.0f / sqrtf(block_sum<kRowThreads>(sum) / static_cast<float>(n) + eps);
    if (rstd_out != nullptr && threadIdx.x == 0) rstd_out[r * groups + g] = rs;
  }
  const float* wg = w + c0;
  for (int64_t c = threadIdx.x; c < n; c += kRowThreads) orow[c] *= rs * wg[c];
}

// dg = rs w do - g rs^3 mean(w do g); dz = dg y silu'(z); dy = dg silu(z); the weight's terms
// do g rs.
__global__ void backward_kernel(int64_t groups, int64_t width, const float* d_out, const float* y,
                                const float* z, int64_t ld_z, const float* rstd, const float* w, float* dy,
                                float* dz, int64_t ld_dz, float* dw_terms) {
  const int64_t r = blockIdx.x / groups, g = blockIdx.x % groups;
  const int64_t n = width / groups, c0 = g * n;
  const float* dor = d_out + r * width + c0;
  const float* yr = y + r * width + c0;
  const float* zr = z + r * ld_z + c0;
  const float* wg = w + c0;
  float* dyr = dy + r * width + c0;
  float* dzr = dz + r * ld_dz + c0;
  const float rs = rstd[r * groups + g];
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < n; c += kRowThreads) {
    const float gv = yr[c] * zr[c] * sigmoid(zr[c]);
    dyr[c] = gv;  // g meanwhile, read back below by this same thread
    sum += wg[c] * dor[c] * gv;
    if (dw_terms != nullptr) dw_terms[r * width + c0 + c] = dor[c] * gv * rs;
  }
  const float k = rs * rs * rs * block_sum<kRowThreads>(sum) / static_cast<float>(n);
  for (int64_t c = threadIdx.x; c < n; c += kRowThreads) {
    const float sg = sigmoid(zr[c]), silu = zr[c] * sg;
    const float dg = rs * wg[c] * dor[c] - dyr[c] * k;
    dzr[c] = dg * yr[c] * sg * (1.0f + zr[c] * (1.0f - sg));
    dyr[c] = dg * silu;
  }
}

}  // namespace

void gated_norm_forward(const GatedNormShape& s, const float* y, const float* z, int64_t ld_z, const float* w,
                        const float* rstd_in, float* o, float* rstd_out, cudaStream_t stream) {
  if (s.rows == 0 || s.width == 0) return;
  forward_kernel<<<row_blocks(s.rows * s.groups), kRowThreads, 0, stream>>>(
      s.groups, s.width, static_cast<float>(s.eps), y, z, ld_z, w, rstd_in, o, rstd_out);
  check_launch("mamba.mixer gated_norm_forward");
}

void gated_norm_backward(const GatedNormShape& s, const float* d_out, const float* y, const float* z,
                         int64_t ld_z, const float* rstd, const float* w, float* dy, float* dz, int64_t ld_dz,
                         float* dw_terms, cudaStream_t stream) {
  if (s.rows == 0 || s.width == 0) return;
  backward_kernel<<<row_blocks(s.rows * s.groups), kRowThreads, 0, stream>>>(
      s.groups, s.width, d_out, y, z, ld_z, rstd, w, dy, dz, ld_dz, dw_terms);
  check_launch("mamba.mixer gated_norm_backward");
}

}  // namespace plexus::mamba::cuda
