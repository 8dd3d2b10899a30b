// The batched Sinkhorn of sinkhorn.hpp: one kernel per loop of ../sinkhorn.cpp.
#include "passes.cuh"
#include "sinkhorn.hpp"

namespace plexus::mhc_native::gpu {
namespace {

// Logit (i, j) of matrix b: rows contiguous, matrices `stride` apart.
struct Logits {
  const float* data;
  int64_t stride, n;
  __device__ float operator()(int64_t b, int64_t i, int64_t j) const { return data[b * stride + i * n + j]; }
};

struct RowMax {  // row_max[b, i] = max_j L[b, i, j]
  Logits logit;
  int64_t n;
  float* row_max;
  __device__ void operator()(int64_t v) const {
    const int64_t b = v / n, i = v % n;
    float m = logit(b, i, 0);
    for (int64_t j = 1; j < n; ++j) m = max_like_std(m, logit(b, i, j));
    row_max[v] = m;
  }
};

struct Shift {  // L - rowmax: <= 0, so exp cannot overflow
  Logits logit;
  int64_t n;
  const float* row_max;
  float* shifted;
  __device__ void operator()(int64_t e) const {
    const int64_t b = e / (n * n), i = e / n % n, j = e % n;
    shifted[e] = logit(b, i, j) - row_max[b * n + i];
  }
};

struct Exp {
  const float* in;
  float* out;
  __device__ void operator()(int64_t e) const { out[e] = expf(in[e]); }
};

// Sums of rows (along j) or of columns (along i) of [batch, n, n] matrices, in double, in index
// order; dots multiply two matrices elementwise first (in float, as the CPU does) and sum that.
struct RowSums {
  const float* a;
  int64_t n;
  float* out;
  __device__ void operator()(int64_t v) const {  // v = b * n + i
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += a[v * n + j];
    out[v] = static_cast<float>(s);
  }
};
struct ColumnSums {
  const float* a;
  int64_t n;
  float* out;
  __device__ void operator()(int64_t v) const {  // v = b * n + j
    const int64_t b = v / n, j = v % n;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += a[(b * n + i) * n + j];
    out[v] = static_cast<float>(s);
  }
};
struct RowDots {
  const float* g;
  const float* a;
  int64_t n;
  float* out;
  __device__ void operator()(int64_t v) const {
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += g[v * n + j] * a[v * n + j];
    out[v] = static_cast<float>(s);
  }
};
struct ColumnDots {
  const float* g;
  const float* a;
  int64_t n;
  float* out;
  __device__ void operator()(int64_t v) const {
    const int64_t b = v / n, j = v % n;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += g[(b * n + i) * n + j] * a[(b * n + i) * n + j];
    out[v] = static_cast<float>(s);
  }
};

struct Clamp {  // max(sum, eps)
  const float* sum;
  float eps;
  float* den;
  __device__ void operator()(int64_t v) const { den[v] = max_like_std(sum[v], eps); }
};

// out[b, i, j] = in[b, i, j] / den[b, i] (rows) or den[b, j] (columns).
struct DivideRows {
  const float* in;
  const float* den;
  int64_t n;
  float* out;
  __device__ void operator()(int64_t e) const { out[e] = in[e] / den[e / n]; }
};
struct DivideColumns {
  const float* in;
  const float* den;
  int64_t n;
  float* out;
  __device__ void operator()(int64_t e) const { out[e] = in[e] / den[e / (n * n) * n + e % n]; }
};

// d sum = -dot / den, and 0 where the clamp is active (sum < eps; at sum = eps the gradient
// passes, as torch.clamp does).
struct DSum {
  const float* dot;
  const float* sum;
  const float* den;
  float eps;
  float* d_sum;
  __device__ void operator()(int64_t v) const { d_sum[v] = sum[v] >= eps ? -dot[v] / den[v] : 0.0f; }
};

// Through out = in / den with den = max(sum, eps): d in = g / den + d sum, in place on g.
struct ThroughRowDivision {
  float* g;
  const float* den;
  const float* d_sum;
  int64_t n;
  __device__ void operator()(int64_t e) const { g[e] = g[e] / den[e / n] + d_sum[e / n]; }
};
struct ThroughColumnDivision {
  float* g;
  const float* den;
  const float* d_sum;
  int64_t n;
  __device__ void operator()(int64_t e) const {
    const int64_t v = e / (n * n) * n + e % n;
    g[e] = g[e] / den[v] + d_sum[v];
  }
};

struct ThroughExp {  // M = exp(L - rowmax), rowmax constant: dL = dM * M
  const float* g;
  const float* exp;
  int64_t n, stride;
  float* grad_logits;
  __device__ void operator()(int64_t e) const {
    const int64_t b = e / (n * n), in_matrix = e % (n * n);
    grad_logits[b * stride + in_matrix] = g[e] * exp[e];
  }
};

constexpr const char* kForward = "mhc_native sinkhorn";
constexpr const char* kBackward = "mhc_native sinkhorn'";

}  // namespace

DeviceSinkhorn::DeviceSinkhorn(int64_t n, int32_t iterations, float eps, int64_t max_batch,
                               cuda_kernels::ScratchLayout& w)
    : n_(n), iterations_(iterations), eps_(eps), max_batch_(max_batch) {
  const int64_t vec = max_batch * n, mat = vec * n, k = iterations;
  row_max_ = w.take<float>(vec);
  shifted_ = w.take<float>(mat);
  exp_ = w.take<float>(mat);
  row_sums_ = w.take<float>(k * vec);
  row_dens_ = w.take<float>(k * vec);
  after_rows_ = w.take<float>(k * mat);
  col_sums_ = w.take<float>(k * vec);
  col_dens_ = w.take<float>(k * vec);
  after_cols_ = w.take<float>(k * mat);
  grad_ = w.take<float>(mat);
  dot_ = w.take<float>(vec);
  d_sum_ = w.take<float>(vec);
}

void DeviceSinkhorn::forward(cudaStream_t stream, int64_t batch, const float* logits, int64_t stride, float* out) {
  batch_ = batch;
  const int64_t n = n_, mat = matrix_elements(), vec = vector_elements();
  const int64_t slot_vec = max_batch_ * n, slot_mat = slot_vec * n;  // one iteration's storage
  const Logits logit{logits, stride, n};

  for_each(stream, vec, RowMax{logit, n, row_max_}, kForward);
  for_each(stream, mat, Shift{logit, n, row_max_, shifted_}, kForward);
  for_each(stream, mat, Exp{shifted_, exp_}, kForward);

  for (int64_t k = 0; k < iterations_; ++k) {
    const float* a = k == 0 ? exp_ : after_cols_ + (k - 1) * slot_mat;
    float* row_sum = row_sums_ + k * slot_vec;
    float* row_den = row_dens_ + k * slot_vec;
    float* after_rows = after_rows_ + k * slot_mat;
    float* col_sum = col_sums_ + k * slot_vec;
    float* col_den = col_dens_ + k * slot_vec;
    float* after_cols = after_cols_ + k * slot_mat;

    for_each(stream, vec, RowSums{a, n, row_sum}, kForward);
    for_each(stream, vec, Clamp{row_sum, eps_, row_den}, kForward);
    for_each(stream, mat, DivideRows{a, row_den, n, after_rows}, kForward);

    for_each(stream, vec, ColumnSums{after_rows, n, col_sum}, kForward);
    for_each(stream, vec, Clamp{col_sum, eps_, col_den}, kForward);
    for_each(stream, mat, DivideColumns{after_rows, col_den, n, after_cols}, kForward);
  }

  PLEXUS_CUDA_CHECK(cudaMemcpyAsync(out, after_cols_ + (iterations_ - 1) * slot_mat,
                                    static_cast<std::size_t>(mat) * sizeof(float), cudaMemcpyDeviceToDevice,
                                    stream),
                    kForward);
}

void DeviceSinkhorn::backward(cudaStream_t stream, const float* grad_out, float* grad_logits, int64_t stride) const {
  const int64_t n = n_, mat = matrix_elements(), vec = vector_elements();
  const int64_t slot_vec = max_batch_ * n, slot_mat = slot_vec * n;

  PLEXUS_CUDA_CHECK(cudaMemcpyAsync(grad_, grad_out, static_cast<std::size_t>(mat) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream),
                    kBackward);

  for (int64_t k = iterations_ - 1; k >= 0; --k) {
    // Column division, out = in / den_j with den_j = max(sum_i in_ij, eps):
    //   d in_ij = g_ij / den_j + d sum_j,  d sum_j = -sum_i g_ij out_ij / den_j (0 when clamped).
    const float* col_sum = col_sums_ + k * slot_vec;
    const float* col_den = col_dens_ + k * slot_vec;
    for_each(stream, vec, ColumnDots{grad_, after_cols_ + k * slot_mat, n, dot_}, kBackward);
    for_each(stream, vec, DSum{dot_, col_sum, col_den, eps_, d_sum_}, kBackward);
    for_each(stream, mat, ThroughColumnDivision{grad_, col_den, d_sum_, n}, kBackward);

    // Row division, the same with rows.
    const float* row_sum = row_sums_ + k * slot_vec;
    const float* row_den = row_dens_ + k * slot_vec;
    for_each(stream, vec, RowDots{grad_, after_rows_ + k * slot_mat, n, dot_}, kBackward);
    for_each(stream, vec, DSum{dot_, row_sum, row_den, eps_, d_sum_}, kBackward);
    for_each(stream, mat, ThroughRowDivision{grad_, row_den, d_sum_, n}, kBackward);
  }

  for_each(stream, mat, ThroughExp{grad_, exp_, n, stride, grad_logits}, kBackward);
}

}  // namespace plexus::mhc_native::gpu
