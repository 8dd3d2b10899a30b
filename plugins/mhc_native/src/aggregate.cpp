// aggregate: the sublayer's input, u = sum_j H_pre[j] * x_j per token.
// Forward is n eager multiply-add passes over u; backward one pass per gradient.
#include <algorithm>

#include "native.hpp"

namespace plexus::mhc_native {

template <class T>
void CpuPrimitives<T>::aggregate_forward(const MhcProblem& pb, const plx_mhc_aggregate_forward_args& a) {
  const T* x = mhc_in<T>(a.x);
  const T* h_pre = mhc_in<T>(a.h_pre);
  T* u = mhc_out<T>(a.u);
  const auto tokens = static_cast<std::size_t>(pb.tokens);
  const auto n = static_cast<std::size_t>(pb.streams);
  const auto c = static_cast<std::size_t>(pb.hidden);

  std::fill_n(u, tokens * c, T(0));
  for (std::size_t j = 0; j < n; ++j)  // u += H_pre[:, j] * x[:, j, :]
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t k = 0; k < c; ++k) u[t * c + k] += h_pre[t * n + j] * x[(t * n + j) * c + k];
}

template <class T>
void CpuPrimitives<T>::aggregate_backward(const MhcProblem& pb, const plx_mhc_aggregate_backward_args& a) {
  const T* x = mhc_in<T>(a.x);
  const T* h_pre = mhc_in<T>(a.h_pre);
  const T* du = mhc_in<T>(a.du);
  const auto tokens = static_cast<std::size_t>(pb.tokens);
  const auto n = static_cast<std::size_t>(pb.streams);
  const auto c = static_cast<std::size_t>(pb.hidden);

  if (T* dh_pre = mhc_out_if<T>(a.dh_pre))  // dH_pre[t, j] = <du[t], x[t, j]>
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t j = 0; j < n; ++j) {
        Acc s = 0;
        for (std::size_t k = 0; k < c; ++k) s += static_cast<Acc>(du[t * c + k]) * x[(t * n + j) * c + k];
        dh_pre[t * n + j] = static_cast<T>(s);
      }

  if (T* dx = mhc_out_if<T>(a.dx))  // dx[t, j] += H_pre[t, j] * du[t]
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t j = 0; j < n; ++j)
        for (std::size_t k = 0; k < c; ++k) dx[(t * n + j) * c + k] += h_pre[t * n + j] * du[t * c + k];
}

PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, aggregate, float);
PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, aggregate, double);

}  // namespace plexus::mhc_native
