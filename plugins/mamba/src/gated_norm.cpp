#include "gated_norm.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "math.hpp"
#include "parallel.hpp"
#include "plexus_kernels/parts.hpp"

namespace plexus::mamba {
namespace {

using detail::sigmoid;

constexpr int64_t kRowBlock = 16;

template <class T>
PLEXUS_KERNELS_SIMD_CLONES void forward_rows(const GatedNormShape& s, int64_t r0, int64_t r1, const T* y,
                                             const T* z, int64_t ld_z, const T* rstd_in, const T* w, T* o,
                                             T* rstd_out) {
  const int64_t n = s.width / s.groups;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < s.groups; ++g) {
      const int64_t c0 = g * n;
      const T* yr = y + r * s.width + c0;
      const T* zr = z + r * ld_z + c0;
      T* orow = o + r * s.width + c0;
      T sum = T(0);
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < n; ++c) {
        orow[c] = yr[c] * zr[c] * sigmoid(zr[c]);
        sum += orow[c] * orow[c];
      }
      T rs;
      if (rstd_in != nullptr) {
        rs = rstd_in[r * s.groups + g];
      } else {
        rs = T(1) / std::sqrt(sum / static_cast<T>(n) + static_cast<T>(s.eps));
        if (rstd_out != nullptr) rstd_out[r * s.groups + g] = rs;
      }
      const T* wg = w + c0;
      for (int64_t c = 0; c < n; ++c) orow[c] *= rs * wg[c];
    }
  }
}

template <class T>
PLEXUS_KERNELS_SIMD_CLONES void backward_rows(const GatedNormShape& s, int64_t r0, int64_t r1, const T* d_out,
                                              const T* y, const T* z, int64_t ld_z, const T* rstd, const T* w,
                                              T* dy, T* dz, int64_t ld_dz, T* dw) {
  const int64_t n = s.width / s.groups;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < s.groups; ++g) {
      const int64_t c0 = g * n;
      const T* dor = d_out + r * s.width + c0;
      const T* yr = y + r * s.width + c0;
      const T* zr = z + r * ld_z + c0;
      const T* wg = w + c0;
      T* dyr = dy + r * s.width + c0;
      T* dzr = dz + r * ld_dz + c0;
      T* dwg = dw + c0;
      const T rs = rstd[r * s.groups + g];
      // mean(q g) with q = w do; dy holds g meanwhile.
      T sum = T(0);
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < n; ++c) {
        const T gv = yr[c] * zr[c] * sigmoid(zr[c]);
        dyr[c] = gv;
        sum += wg[c] * dor[c] * gv;
        dwg[c] += dor[c] * gv * rs;
      }
      const T k = rs * rs * rs * sum / static_cast<T>(n);
      for (int64_t c = 0; c < n; ++c) {
        const T sg = sigmoid(zr[c]), silu = zr[c] * sg;
        const T dg = rs * wg[c] * dor[c] - dyr[c] * k;
        dzr[c] = dg * yr[c] * sg * (T(1) + zr[c] * (T(1) - sg));
        dyr[c] = dg * silu;
      }
    }
  }
}

template <class T>
void run_forward(const GatedNormShape& s, const T* y, const T* z, int64_t ld_z, const T* rstd_in, const T* w,
                 T* o, T* rstd_out) {
  const int64_t blocks = (s.rows + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(s.rows * s.width))
  for (int64_t i = 0; i < blocks; ++i)
    forward_rows(s, i * kRowBlock, std::min(s.rows, (i + 1) * kRowBlock), y, z, ld_z, rstd_in, w, o,
                 rstd_out);
}

}  // namespace

template <class T>
void gated_norm_forward(const GatedNormShape& s, const T* y, const T* z, int64_t ld_z, const T* w, T* o,
                        T* rstd) {
  run_forward(s, y, z, ld_z, static_cast<const T*>(nullptr), w, o, rstd);
}

template <class T>
void gated_norm_output(const GatedNormShape& s, const T* y, const T* z, int64_t ld_z, const T* rstd,
                       const T* w, T* o) {
  run_forward(s, y, z, ld_z, rstd, w, o, static_cast<T*>(nullptr));
}

template <class T>
void gated_norm_backward(const GatedNormShape& s, const T* d_out, const T* y, const T* z, int64_t ld_z,
                         const T* rstd, const T* w, T* dy, T* dz, int64_t ld_dz, T* dw) {
  // dw: one partial sum per part, added in part order (plexus_kernels/parts.hpp: the part count
  // is fixed by the size, so the sum does not depend on the thread count).
  const int64_t blocks = (s.rows + kRowBlock - 1) / kRowBlock;
  const int parts = plexus::kernels::reduction_parts(blocks, detail::worth_parallel(s.rows * s.width));
  const auto width = static_cast<std::size_t>(s.width);
  std::vector<T> partial(width * static_cast<std::size_t>(parts), T(0));
#pragma omp parallel for schedule(static) if (parts > 1)
  for (int part = 0; part < parts; ++part) {
    const plexus::kernels::PartRange mine = plexus::kernels::part_range(blocks, part, parts);
    backward_rows(s, mine.begin * kRowBlock, std::min(s.rows, mine.end * kRowBlock), d_out, y, z, ld_z, rstd,
                  w, dy, dz, ld_dz, partial.data() + width * static_cast<std::size_t>(part));
  }
  if (dw == nullptr) return;
  for (int part = 0; part < parts; ++part) {
    const T* sums = partial.data() + width * static_cast<std::size_t>(part);
    for (int64_t c = 0; c < s.width; ++c) dw[c] += sums[c];
  }
}

template void gated_norm_forward<float>(const GatedNormShape&, const float*, const float*, int64_t,
                                        const float*, float*, float*);
template void gated_norm_forward<double>(const GatedNormShape&, const double*, const double*, int64_t,
                                         const double*, double*, double*);
template void gated_norm_output<float>(const GatedNormShape&, const float*, const float*, int64_t,
                                       const float*, const float*, float*);
template void gated_norm_output<double>(const GatedNormShape&, const double*, const double*, int64_t,
                                        const double*, const double*, double*);
template void gated_norm_backward<float>(const GatedNormShape&, const float*, const float*, const float*,
                                         int64_t, const float*, const float*, float*, float*, int64_t,
                                         float*);
template void gated_norm_backward<double>(const GatedNormShape&, const double*, const double*, const double*,
                                          int64_t, const double*, const double*, double*, double*, int64_t,
                                          double*);

}  // namespace plexus::mamba
