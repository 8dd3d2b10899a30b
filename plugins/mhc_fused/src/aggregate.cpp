// aggregate: the sublayer's input, u = sum_j H_pre[j] * x_j per token.
// One pass over tokens, one thread per contiguous range: forward reads each element of x once
// and writes each element of u once (summed in T, stream 0 first, as the reference sums it;
// rows.hpp); backward reads x and du once and reads and writes dx once, forming
// dH_pre[j] = <du, x_j> (in double) in the same loop that adds H_pre[j] * du to dx_j.
#include <algorithm>

#include "fused.hpp"
#include "rows.hpp"
#include "simd.hpp"
#include "small_array.hpp"
#include "team.hpp"

namespace plexus::mhc_fused {
namespace {

// Values of C per pass of the weighted sum (its running sum stays in L1).
constexpr int64_t kTile = 512;

template <class T>
struct Forward {
  const T* x;
  const T* h_pre;
  T* u;
  int64_t n, c;
};

template <class T>
PLEXUS_MHC_FUSED_INLINE void forward_tokens(const Forward<T>& a, int64_t begin, int64_t end) {
  const int64_t n = a.n, c = a.c;
  SmallArray<const T*, 8> rows(static_cast<std::size_t>(n));
  alignas(64) T tmp[kTile];
  for (int64_t t = begin; t < end; ++t) {
    const T* xt = a.x + t * n * c;
    for (int64_t k0 = 0; k0 < c; k0 += kTile) {
      const int64_t len = std::min(kTile, c - k0);
      for (int64_t j = 0; j < n; ++j) rows[j] = xt + j * c + k0;
      weighted_sum(rows.data(), a.h_pre + t * n, n, len, tmp, a.u + t * c + k0, Into::write);
    }
  }
}

template <class T>
struct Backward {
  const T* x;
  const T* h_pre;
  const T* du;
  T* dx;      // optional: nullptr when not wanted
  T* dh_pre;  // optional
  int64_t n, c;
};

template <class T>
PLEXUS_MHC_FUSED_INLINE void backward_tokens(const Backward<T>& a, int64_t begin, int64_t end) {
  const int64_t n = a.n, c = a.c;
  for (int64_t t = begin; t < end; ++t) {
    const T* g = a.du + t * c;
    for (int64_t j = 0; j < n; ++j) {
      const T* xj = a.x + (t * n + j) * c;
      const T hj = a.h_pre[t * n + j];
      T* dxj = a.dx != nullptr ? a.dx + (t * n + j) * c : nullptr;
      if (a.dh_pre == nullptr) {
#pragma omp simd
        for (int64_t k = 0; k < c; ++k) dxj[k] += hj * g[k];
        continue;
      }
      Acc s = 0;
      if (dxj != nullptr) {
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < c; ++k) {
          s += static_cast<Acc>(g[k]) * static_cast<Acc>(xj[k]);
          dxj[k] += hj * g[k];
        }
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < c; ++k) s += static_cast<Acc>(g[k]) * static_cast<Acc>(xj[k]);
      }
      a.dh_pre[t * n + j] = static_cast<T>(s);
    }
  }
}

PLEXUS_MHC_FUSED_CLONES void aggregate_tokens_f32(const Forward<float>& a, int64_t begin, int64_t end) {
  forward_tokens(a, begin, end);
}
PLEXUS_MHC_FUSED_CLONES void aggregate_tokens_f64(const Forward<double>& a, int64_t begin, int64_t end) {
  forward_tokens(a, begin, end);
}
PLEXUS_MHC_FUSED_CLONES void aggregate_grad_tokens_f32(const Backward<float>& a, int64_t begin, int64_t end) {
  backward_tokens(a, begin, end);
}
PLEXUS_MHC_FUSED_CLONES void aggregate_grad_tokens_f64(const Backward<double>& a, int64_t begin,
                                                       int64_t end) {
  backward_tokens(a, begin, end);
}
void run_tokens(const Forward<float>& a, int64_t begin, int64_t end) {
  aggregate_tokens_f32(a, begin, end);
}
void run_tokens(const Forward<double>& a, int64_t begin, int64_t end) {
  aggregate_tokens_f64(a, begin, end);
}
void run_tokens(const Backward<float>& a, int64_t begin, int64_t end) {
  aggregate_grad_tokens_f32(a, begin, end);
}
void run_tokens(const Backward<double>& a, int64_t begin, int64_t end) {
  aggregate_grad_tokens_f64(a, begin, end);
}

// Runs `args` over all tokens, one contiguous range per thread.
template <class Args>
void over_tokens(const MhcProblem& pb, const Args& args, double work_per_element) {
  const double work =
      work_per_element * static_cast<double>(pb.tokens) * static_cast<double>(pb.streams * pb.hidden);
  run_parts(part_count(pb.tokens, work), [&](int part, int parts) {
    const Range mine = part_range(pb.tokens, part, parts);
    run_tokens(args, mine.begin, mine.end);
  });
}

}  // namespace

template <class T>
void CpuPrimitives<T>::aggregate_forward(const MhcProblem& pb, const plx_mhc_aggregate_forward_args& a) {
  over_tokens(pb, Forward<T>{mhc_in<T>(a.x), mhc_in<T>(a.h_pre), mhc_out<T>(a.u), pb.streams, pb.hidden},
              1.0);
}

template <class T>
void CpuPrimitives<T>::aggregate_backward(const MhcProblem& pb, const plx_mhc_aggregate_backward_args& a) {
  const Backward<T> args{mhc_in<T>(a.x),          mhc_in<T>(a.h_pre), mhc_in<T>(a.du), mhc_out_if<T>(a.dx),
                         mhc_out_if<T>(a.dh_pre), pb.streams,         pb.hidden};
  if (args.dx == nullptr && args.dh_pre == nullptr) return;
  over_tokens(pb, args, 2.0);
}

PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, aggregate, float);
PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, aggregate, double);

}  // namespace plexus::mhc_fused
