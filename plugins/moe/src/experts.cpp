#include "experts.hpp"

#include "plexus_kernels/activation.hpp"
#include "plexus_kernels/gemm.hpp"

namespace plexus::moe {
namespace {
namespace k = plexus::kernels;
using k::Trans;
std::size_t sz(int64_t v) { return static_cast<std::size_t>(v); }
}  // namespace

template <class T>
void experts_forward(const MlpShape& shape, const std::vector<int64_t>& offsets, const ExpertWeights<T>& w,
                     const T* x_perm, ExpertsSaved& s, T* y_perm) {
  const int64_t rows = offsets.back(), hidden = shape.hidden, f = shape.ffn, f1 = shape.fc1_rows();
  const auto experts = static_cast<int64_t>(offsets.size()) - 1;
  T* a = s.a.get<T>(sz(rows * f1));
  T* act = s.act.get<T>(sz(rows * f));
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[sz(e)], n = offsets[sz(e + 1)] - first;
    if (n == 0) continue;
    k::gemm_parallel<T>(Trans::N, Trans::T, n, f1, hidden, T(1), x_perm + first * hidden, hidden, w.fc1[sz(e)],
                        hidden, T(0), a + first * f1, f1);
  }
  if (shape.swiglu)
    k::swiglu_forward<T>(rows, f, a, act);
  else
    k::gelu_forward<T>(rows * f, a, act);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[sz(e)], n = offsets[sz(e + 1)] - first;
    if (n == 0) continue;
    k::gemm_parallel<T>(Trans::N, Trans::T, n, hidden, f, T(1), act + first * f, f, w.fc2[sz(e)], f, T(0),
                        y_perm + first * hidden, hidden);
  }
}

template <class T>
void experts_backward(const MlpShape& shape, const std::vector<int64_t>& offsets, const ExpertWeights<T>& w,
                      const ExpertGrads<T>& g, const ExpertsSaved& s, const T* x_perm, const T* dy_perm,
                      T* dx_perm) {
  const int64_t rows = offsets.back(), hidden = shape.hidden, f = shape.ffn, f1 = shape.fc1_rows();
  const auto experts = static_cast<int64_t>(offsets.size()) - 1;
  const T* a = s.a.data<T>();
  const T* act = s.act.data<T>();
  k::Buffer dact_buf, da_buf;
  T* dact = dact_buf.get<T>(sz(rows * f));
  // y = act W2^T:  dact = dy W2,  dW2 += dy^T act.
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[sz(e)], n = offsets[sz(e + 1)] - first;
    if (n == 0) continue;
    k::gemm_parallel<T>(Trans::N, Trans::N, n, f, hidden, T(1), dy_perm + first * hidden, hidden, w.fc2[sz(e)], f,
                        T(0), dact + first * f, f);
    if (g.fc2[sz(e)] != nullptr)
      k::gemm_parallel<T>(Trans::T, Trans::N, hidden, f, n, T(1), dy_perm + first * hidden, hidden, act + first * f,
                          f, T(1), g.fc2[sz(e)], f);
  }
  T* da = shape.swiglu ? da_buf.get<T>(sz(rows * f1)) : dact;  // gelu: in place
  if (shape.swiglu)
    k::swiglu_backward<T>(rows, f, a, dact, da);
  else
    k::gelu_backward<T>(rows * f, a, dact, da);
  // a = x W1^T:  dW1 += da^T x,  dx = da W1.
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[sz(e)], n = offsets[sz(e + 1)] - first;
    if (n == 0) continue;
    if (g.fc1[sz(e)] != nullptr)
      k::gemm_parallel<T>(Trans::T, Trans::N, f1, hidden, n, T(1), da + first * f1, f1, x_perm + first * hidden,
                          hidden, T(1), g.fc1[sz(e)], hidden);
    k::gemm_parallel<T>(Trans::N, Trans::N, n, hidden, f1, T(1), da + first * f1, f1, w.fc1[sz(e)], hidden, T(0),
                        dx_perm + first * hidden, hidden);
  }
}

template void experts_forward<float>(const MlpShape&, const std::vector<int64_t>&, const ExpertWeights<float>&,
                                     const float*, ExpertsSaved&, float*);
template void experts_forward<double>(const MlpShape&, const std::vector<int64_t>&, const ExpertWeights<double>&,
                                      const double*, ExpertsSaved&, double*);
template void experts_backward<float>(const MlpShape&, const std::vector<int64_t>&, const ExpertWeights<float>&,
                                      const ExpertGrads<float>&, const ExpertsSaved&, const float*, const float*,
                                      float*);
template void experts_backward<double>(const MlpShape&, const std::vector<int64_t>&, const ExpertWeights<double>&,
                                       const ExpertGrads<double>&, const ExpertsSaved&, const double*,
                                       const double*, double*);

}  // namespace plexus::moe
