#include "expert_tensor_parallel.hpp"

#include <algorithm>
#include <type_traits>

#include "plexus/tensor.h"

namespace plexus::moe {
namespace {

template <class T>
DLDataType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return plx_dtype_f32();
  else
    return plx_dtype_f64();
}

DLTensor host_view(void* data, DLDataType dtype, int64_t* shape) {
  return DLTensor{data, DLDevice{kDLCPU, 0}, 1, dtype, shape, nullptr, 0};
}

// Where rank r's rows of expert e start: in its own block (rank-major, expert-major within), and
// in the gathered expert-major order.
int64_t in_block(const EtpLayout& l, int32_t r, int64_t e) {
  int64_t at = 0;
  for (int64_t j = 0; j < e; ++j) at += l.counts[static_cast<std::size_t>(r * l.experts + j)];
  return at;
}
int64_t in_gathered(const EtpLayout& l, int32_t r, int64_t e) {
  int64_t at = l.offsets[static_cast<std::size_t>(e)];
  for (int32_t s = 0; s < r; ++s) at += l.counts[static_cast<std::size_t>(s * l.experts + e)];
  return at;
}

}  // namespace

int64_t EtpLayout::own() const {
  int64_t n = 0;
  for (int64_t e = 0; e < experts; ++e) n += counts[static_cast<std::size_t>(rank * experts + e)];
  return n;
}

EtpLayout EtpLayout::build(const plexus::sdk::Group& group, const std::vector<int64_t>& own_offsets) {
  EtpLayout l;
  l.ranks = group.size();
  l.rank = group.rank();
  l.experts = static_cast<int64_t>(own_offsets.size()) - 1;
  std::vector<int64_t> mine(static_cast<std::size_t>(l.experts));
  for (int64_t e = 0; e < l.experts; ++e)
    mine[static_cast<std::size_t>(e)] =
        own_offsets[static_cast<std::size_t>(e + 1)] - own_offsets[static_cast<std::size_t>(e)];
  l.counts.assign(static_cast<std::size_t>(l.ranks * l.experts), 0);
  int64_t send_shape = l.experts, recv_shape = l.ranks * l.experts;
  const DLTensor send = host_view(mine.data(), plx_dtype_i64(), &send_shape);
  DLTensor recv = host_view(l.counts.data(), plx_dtype_i64(), &recv_shape);
  group.all_gather(send, recv);
  l.offsets.assign(static_cast<std::size_t>(l.experts + 1), 0);
  for (int64_t e = 0; e < l.experts; ++e) {
    int64_t rows = 0;
    for (int32_t r = 0; r < l.ranks; ++r) rows += l.counts[static_cast<std::size_t>(r * l.experts + e)];
    l.offsets[static_cast<std::size_t>(e + 1)] = l.offsets[static_cast<std::size_t>(e)] + rows;
  }
  for (int32_t r = 0; r < l.ranks; ++r) {
    int64_t rows = 0;
    for (int64_t e = 0; e < l.experts; ++e) rows += l.counts[static_cast<std::size_t>(r * l.experts + e)];
    l.block = std::max(l.block, rows);
  }
  return l;
}

template <class T>
void etp_gather_rows(const plexus::sdk::Group& group, const EtpLayout& l, const T* x, int64_t cols, T* all,
                     std::vector<T>& padded) {
  // One padded block a rank (an all-gather of equal blocks), then each (rank, expert) chunk to
  // its place in the expert-major order.
  const int64_t block = std::max<int64_t>(l.block, 1) * cols;
  std::vector<T> mine(static_cast<std::size_t>(block), T(0));
  std::copy_n(x, l.own() * cols, mine.data());
  padded.resize(static_cast<std::size_t>(block * l.ranks));
  int64_t send_shape = block, recv_shape = block * l.ranks;
  const DLTensor send = host_view(mine.data(), dtype_of<T>(), &send_shape);
  DLTensor recv = host_view(padded.data(), dtype_of<T>(), &recv_shape);
  group.all_gather(send, recv);
  for (int32_t r = 0; r < l.ranks; ++r)
    for (int64_t e = 0; e < l.experts; ++e)
      std::copy_n(padded.data() + r * block + in_block(l, r, e) * cols,
                  l.counts[static_cast<std::size_t>(r * l.experts + e)] * cols,
                  all + in_gathered(l, r, e) * cols);
}

template <class T>
void etp_scatter_sum_rows(const plexus::sdk::Group& group, const EtpLayout& l, const T* all, int64_t cols,
                          T* y, std::vector<T>& padded) {
  const int64_t block = std::max<int64_t>(l.block, 1) * cols;
  padded.assign(static_cast<std::size_t>(block * l.ranks), T(0));
  for (int32_t r = 0; r < l.ranks; ++r)
    for (int64_t e = 0; e < l.experts; ++e)
      std::copy_n(all + in_gathered(l, r, e) * cols,
                  l.counts[static_cast<std::size_t>(r * l.experts + e)] * cols,
                  padded.data() + r * block + in_block(l, r, e) * cols);
  std::vector<T> mine(static_cast<std::size_t>(block));
  int64_t send_shape = block * l.ranks, recv_shape = block;
  const DLTensor send = host_view(padded.data(), dtype_of<T>(), &send_shape);
  DLTensor recv = host_view(mine.data(), dtype_of<T>(), &recv_shape);
  group.reduce_scatter(send, recv);
  std::copy_n(mine.data(), l.own() * cols, y);
}

template void etp_gather_rows<float>(const plexus::sdk::Group&, const EtpLayout&, const float*, int64_t,
                                     float*, std::vector<float>&);
template void etp_gather_rows<double>(const plexus::sdk::Group&, const EtpLayout&, const double*, int64_t,
                                      double*, std::vector<double>&);
template void etp_scatter_sum_rows<float>(const plexus::sdk::Group&, const EtpLayout&, const float*, int64_t,
                                          float*, std::vector<float>&);
template void etp_scatter_sum_rows<double>(const plexus::sdk::Group&, const EtpLayout&, const double*,
                                           int64_t, double*, std::vector<double>&);

}  // namespace plexus::moe
