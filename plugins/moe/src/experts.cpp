#include "experts.hpp"

#include "plexus_kernels/activation.hpp"
#include "plexus_kernels/gemm.hpp"

namespace plexus::moe {
namespace {
namespace k = plexus::kernels;
using k::Trans;
std::size_t sz(int64_t v) {
  return static_cast<std::size_t>(v);
}
// Room for n elements, never a null pointer (an expert group may get no rows).
std::size_t at_least_one(int64_t n) {
  return n > 0 ? sz(n) : 1;
}

// fn(e, first, n) for every expert e with rows, in expert order: its block is rows
// [first, first + n) of the permuted tensors (offsets: experts + 1 prefix sums).
template <class Fn>
void for_each_block(const std::vector<int64_t>& offsets, Fn&& fn) {
  for (std::size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t first = offsets[e], n = offsets[e + 1] - first;
    if (n > 0) fn(e, first, n);
  }
}
}  // namespace

template <class T>
void experts_forward(const MlpShape& shape, const std::vector<int64_t>& offsets, const ExpertWeights<T>& w,
                     const T* x_perm, ExpertsSaved& s, T* y_perm) {
  const int64_t rows = offsets.back(), hidden = shape.hidden, f = shape.ffn, f1 = shape.fc1_rows();
  T* a = s.a.get<T>(sz(rows * f1));
  T* act = s.act.get<T>(sz(rows * f));
  for_each_block(offsets, [&](std::size_t e, int64_t first, int64_t n) {
    k::gemm_parallel<T>(Trans::N, Trans::T, n, f1, hidden, T(1), x_perm + first * hidden, hidden, w.fc1[e],
                        hidden, T(0), a + first * f1, f1);
  });
  if (shape.swiglu)
    k::swiglu_forward<T>(rows, f, a, act);
  else
    k::gelu_forward<T>(rows * f, a, act);
  for_each_block(offsets, [&](std::size_t e, int64_t first, int64_t n) {
    k::gemm_parallel<T>(Trans::N, Trans::T, n, hidden, f, T(1), act + first * f, f, w.fc2[e], f, T(0),
                        y_perm + first * hidden, hidden);
  });
}

template <class T>
void experts_backward_inputs(const MlpShape& shape, const std::vector<int64_t>& offsets,
                             const ExpertWeights<T>& w, const ExpertsSaved& s, const T* dy_perm, T* dx_perm,
                             k::Buffer& da_keep) {
  const int64_t rows = offsets.back(), hidden = shape.hidden, f = shape.ffn, f1 = shape.fc1_rows();
  const T* a = s.a.data<T>();
  k::Buffer dact_buf;
  // gelu: da is dact, computed in place.
  T* da = da_keep.get<T>(at_least_one(rows * f1));
  T* dact = shape.swiglu ? dact_buf.get<T>(at_least_one(rows * f)) : da;
  // y = act W2^T:  dact = dy W2.
  for_each_block(offsets, [&](std::size_t e, int64_t first, int64_t n) {
    k::gemm_parallel<T>(Trans::N, Trans::N, n, f, hidden, T(1), dy_perm + first * hidden, hidden, w.fc2[e], f,
                        T(0), dact + first * f, f);
  });
  if (shape.swiglu)
    k::swiglu_backward<T>(rows, f, a, dact, da);
  else
    k::gelu_backward<T>(rows * f, a, dact, da);
  // a = x W1^T:  dx = da W1.
  for_each_block(offsets, [&](std::size_t e, int64_t first, int64_t n) {
    k::gemm_parallel<T>(Trans::N, Trans::N, n, hidden, f1, T(1), da + first * f1, f1, w.fc1[e], hidden, T(0),
                        dx_perm + first * hidden, hidden);
  });
}

template <class T>
void experts_backward_weights(const MlpShape& shape, const std::vector<int64_t>& offsets,
                              const ExpertGrads<T>& g, const ExpertsSaved& s, const T* x_perm,
                              const T* dy_perm, const k::Buffer& da_kept) {
  const int64_t hidden = shape.hidden, f = shape.ffn, f1 = shape.fc1_rows();
  const T* act = s.act.data<T>();
  const T* da = da_kept.data<T>();
  // dW2 += dy^T act,  dW1 += da^T x.
  for_each_block(offsets, [&](std::size_t e, int64_t first, int64_t n) {
    if (g.fc2[e] != nullptr)
      k::gemm_parallel<T>(Trans::T, Trans::N, hidden, f, n, T(1), dy_perm + first * hidden, hidden,
                          act + first * f, f, T(1), g.fc2[e], f);
    if (g.fc1[e] != nullptr)
      k::gemm_parallel<T>(Trans::T, Trans::N, f1, hidden, n, T(1), da + first * f1, f1,
                          x_perm + first * hidden, hidden, T(1), g.fc1[e], hidden);
  });
}

#define PLEXUS_MOE_EXPERTS(T)                                                                               \
  template void experts_forward<T>(const MlpShape&, const std::vector<int64_t>&, const ExpertWeights<T>&,   \
                                   const T*, ExpertsSaved&, T*);                                            \
  template void experts_backward_inputs<T>(const MlpShape&, const std::vector<int64_t>&,                    \
                                           const ExpertWeights<T>&, const ExpertsSaved&, const T*, T*,      \
                                           k::Buffer&);                                                     \
  template void experts_backward_weights<T>(const MlpShape&, const std::vector<int64_t>&,                   \
                                            const ExpertGrads<T>&, const ExpertsSaved&, const T*, const T*, \
                                            const k::Buffer&);
PLEXUS_MOE_EXPERTS(float)
PLEXUS_MOE_EXPERTS(double)
#undef PLEXUS_MOE_EXPERTS

}  // namespace plexus::moe
