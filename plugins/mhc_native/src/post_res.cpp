// post_res: the new residual streams, per token and stream i,
//   y_i = sum_j H(i, j) * x_j + H_post[i] * (f + bias)
// with H(i, j) = H_res[i][j], or H_res[j][i] under PLX_MHC_TRANSPOSED_H_RES. Eager passes: the
// stream mix (a batched n x n by n x C product), f + bias, then the H_post-weighted add.
#include <algorithm>
#include <vector>

#include "native.hpp"

namespace plexus::mhc_native {
namespace {

// The mixing matrix H(i, j) of token t, in either orientation.
template <class T>
struct Mix {
  const T* h_res;
  std::size_t n;
  bool transposed;
  T operator()(std::size_t t, std::size_t i, std::size_t j) const {
    return transposed ? h_res[(t * n + j) * n + i] : h_res[(t * n + i) * n + j];
  }
};

// f + bias as [T, C]; just f when F has no output bias.
template <class T>
const T* f_plus_bias(const T* f, const T* bias, std::size_t tokens, std::size_t c, std::vector<T>& storage) {
  if (bias == nullptr) return f;
  storage.resize(tokens * c);
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t k = 0; k < c; ++k) storage[t * c + k] = f[t * c + k] + bias[k];
  return storage.data();
}

}  // namespace

template <class T>
void CpuPrimitives<T>::post_res_forward(const MhcProblem& pb, const plx_mhc_post_res_forward_args& a) {
  const T* x = mhc_in<T>(a.x);
  const T* h_post = mhc_in<T>(a.h_post);
  T* y = mhc_out<T>(a.y);
  const auto tokens = static_cast<std::size_t>(pb.tokens);
  const auto n = static_cast<std::size_t>(pb.streams);
  const auto c = static_cast<std::size_t>(pb.hidden);
  const Mix<T> mix{mhc_in<T>(a.h_res), n, pb.transposed_h_res};

  for (std::size_t t = 0; t < tokens; ++t)  // y[t, i] = sum_j H(i, j) x[t, j]
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < c; ++k) {
        Acc s = 0;
        for (std::size_t j = 0; j < n; ++j) s += static_cast<Acc>(mix(t, i, j)) * x[(t * n + j) * c + k];
        y[(t * n + i) * c + k] = static_cast<T>(s);
      }

  std::vector<T> storage;
  const T* fb = f_plus_bias(mhc_in<T>(a.f), mhc_in_if<T>(a.bias), tokens, c, storage);
  for (std::size_t t = 0; t < tokens; ++t)  // y[t, i] += H_post[t, i] * (f + bias)[t]
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < c; ++k) y[(t * n + i) * c + k] += h_post[t * n + i] * fb[t * c + k];
}

template <class T>
void CpuPrimitives<T>::post_res_backward(const MhcProblem& pb, const plx_mhc_post_res_backward_args& a) {
  const T* x = mhc_in<T>(a.x);
  const T* h_post = mhc_in<T>(a.h_post);
  const T* dy = mhc_in<T>(a.dy);
  const auto tokens = static_cast<std::size_t>(pb.tokens);
  const auto n = static_cast<std::size_t>(pb.streams);
  const auto c = static_cast<std::size_t>(pb.hidden);
  const Mix<T> mix{mhc_in<T>(a.h_res), n, pb.transposed_h_res};

  if (T* dx = mhc_out_if<T>(a.dx))  // dx[t, j] += sum_i H(i, j) dy[t, i]
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t j = 0; j < n; ++j)
        for (std::size_t k = 0; k < c; ++k) {
          Acc s = 0;
          for (std::size_t i = 0; i < n; ++i) s += static_cast<Acc>(mix(t, i, j)) * dy[(t * n + i) * c + k];
          dx[(t * n + j) * c + k] += static_cast<T>(s);
        }

  if (T* dh_res = mhc_out_if<T>(a.dh_res))  // dH(i, j) = <dy[t, i], x[t, j]>, stored where H(i, j) is read
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < n; ++j) {
          Acc s = 0;
          for (std::size_t k = 0; k < c; ++k)
            s += static_cast<Acc>(dy[(t * n + i) * c + k]) * x[(t * n + j) * c + k];
          const std::size_t at = pb.transposed_h_res ? (t * n + j) * n + i : (t * n + i) * n + j;
          dh_res[at] = static_cast<T>(s);
        }

  if (T* dh_post = mhc_out_if<T>(a.dh_post)) {  // dH_post[t, i] = <dy[t, i], (f + bias)[t]>
    std::vector<T> storage;
    const T* fb = f_plus_bias(mhc_in<T>(a.f), mhc_in_if<T>(a.bias), tokens, c, storage);
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t i = 0; i < n; ++i) {
        Acc s = 0;
        for (std::size_t k = 0; k < c; ++k) s += static_cast<Acc>(dy[(t * n + i) * c + k]) * fb[t * c + k];
        dh_post[t * n + i] = static_cast<T>(s);
      }
  }

  // df[t] = sum_i H_post[t, i] dy[t, i]; dbias needs it too, so it goes to a temporary when df
  // itself is not wanted.
  T* df = mhc_out_if<T>(a.df);
  T* dbias = mhc_out_if<T>(a.dbias);
  if (df == nullptr && dbias == nullptr) return;
  std::vector<T> df_storage;
  if (df == nullptr) {
    df_storage.resize(tokens * c);
    df = df_storage.data();
  }
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t k = 0; k < c; ++k) {
      Acc s = 0;
      for (std::size_t i = 0; i < n; ++i) s += static_cast<Acc>(h_post[t * n + i]) * dy[(t * n + i) * c + k];
      df[t * c + k] = static_cast<T>(s);
    }
  if (dbias != nullptr)  // dbias += sum_t df[t]
    for (std::size_t k = 0; k < c; ++k) {
      Acc s = 0;
      for (std::size_t t = 0; t < tokens; ++t) s += df[t * c + k];
      dbias[k] += static_cast<T>(s);
    }
}

PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, post_res, float);
PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, post_res, double);

}  // namespace plexus::mhc_native
