#include "expert_exchange.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "config.hpp"
#include "plexus/cpp/error.hpp"

namespace plexus::moe {
namespace {

using plexus::sdk::Error;

std::size_t sz(int64_t v) { return static_cast<std::size_t>(v); }

template <class T>
DLDataType dtype_of_element() {
  if constexpr (std::is_same_v<T, int64_t>) return DLDataType{kDLInt, 64, 1};
  else return DLDataType{kDLFloat, static_cast<uint8_t>(8 * sizeof(T)), 1};
}

// A flat CPU tensor over n elements (at least 1, so that no backend sees a null pointer for an
// empty side of the exchange).
template <class T>
DLTensor flat(const T* data, int64_t& extent) {
  DLTensor t{};
  t.data = const_cast<T*>(data);
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = dtype_of_element<T>();
  t.shape = &extent;
  return t;
}

std::vector<int64_t> scaled(const std::vector<int64_t>& rows, int64_t cols) {
  std::vector<int64_t> out(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * cols;
  return out;
}

// The host already described a failed call (its set_error ran): keep its message.
void check(plx_status status) {
  if (status != PLX_OK) throw Error::from_host(status);
}

}  // namespace

ExpertGroup ExpertGroup::find(const plx_host_api& host, int64_t experts) {
  ExpertGroup g;
  g.local_experts = experts;
  if (host.group_get == nullptr || host.group_rank == nullptr) return g;
  plx_group group = nullptr;
  if (host.group_get(host.ctx, "ep", &group) != PLX_OK || group == nullptr) return g;
  int32_t rank = 0, size = 1;
  if (host.group_rank(host.ctx, group, &rank, &size) != PLX_OK || size <= 1) return g;
  if (experts % size != 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string(kComponent) + " option num_moe_experts (" + std::to_string(experts) +
                    ") must be divisible by the expert-parallel size (the \"ep\" group has " + std::to_string(size) +
                    " ranks): every rank holds the same number of experts");
  if (host.all_to_all_v == nullptr || host.request_wait == nullptr)
    throw Error(PLX_ERR_UNSUPPORTED,
                std::string(kComponent) + ": expert parallelism needs the host's all_to_all_v and request_wait");
  g.group = group;
  g.rank = rank;
  g.size = size;
  g.local_experts = experts / size;
  g.first_expert = g.local_experts * rank;
  return g;
}

ExchangeLayout ExchangeLayout::build(const ExpertGroup& g, const std::vector<int64_t>& perm_offsets,
                                     const std::vector<int64_t>& arrived) {
  ExchangeLayout l;
  const int64_t ranks = g.size, L = g.local_experts;
  l.ranks = ranks;
  l.local_experts = L;
  l.send_rows.resize(sz(ranks));
  l.send_offsets.resize(sz(ranks));
  for (int64_t r = 0; r < ranks; ++r) {
    l.send_offsets[sz(r)] = perm_offsets[sz(r * L)];
    l.send_rows[sz(r)] = perm_offsets[sz((r + 1) * L)] - perm_offsets[sz(r * L)];
  }
  l.chunk_rows = arrived;
  l.recv_rows.assign(sz(ranks), 0);
  l.recv_offsets.assign(sz(ranks), 0);
  l.source_offset.resize(sz(ranks * L));
  l.expert_offset.resize(sz(ranks * L));
  int64_t at = 0;
  for (int64_t s = 0; s < ranks; ++s) {
    l.recv_offsets[sz(s)] = at;
    for (int64_t j = 0; j < L; ++j) {
      l.source_offset[sz(s * L + j)] = at;
      at += arrived[sz(s * L + j)];
    }
    l.recv_rows[sz(s)] = at - l.recv_offsets[sz(s)];
  }
  l.expert_offsets.assign(sz(L + 1), 0);
  at = 0;
  for (int64_t j = 0; j < L; ++j) {
    l.expert_offsets[sz(j)] = at;
    for (int64_t s = 0; s < ranks; ++s) {
      l.expert_offset[sz(s * L + j)] = at;
      at += arrived[sz(s * L + j)];
    }
  }
  l.expert_offsets[sz(L)] = at;
  return l;
}

std::vector<int64_t> exchange_counts(const plx_host_api& host, const ExpertGroup& g,
                                     const std::vector<int64_t>& perm_offsets, plx_stream stream) {
  const int64_t ranks = g.size, L = g.local_experts;
  std::vector<int64_t> mine(sz(ranks * L)), arrived(sz(ranks * L));
  for (int64_t e = 0; e < ranks * L; ++e) mine[sz(e)] = perm_offsets[sz(e + 1)] - perm_offsets[sz(e)];
  std::vector<int64_t> counts(sz(ranks), L), offsets(sz(ranks));
  for (int64_t r = 0; r < ranks; ++r) offsets[sz(r)] = r * L;
  int64_t extent = ranks * L;
  DLTensor send = flat(mine.data(), extent), recv = flat(arrived.data(), extent);
  check(host.all_to_all_v(host.ctx, g.group, &send, counts.data(), offsets.data(), &recv, counts.data(),
                          offsets.data(), stream, nullptr));
  return arrived;
}

template <class T>
plx_request start_rows_exchange(const plx_host_api& host, const ExpertGroup& g, const T* send,
                                const std::vector<int64_t>& send_rows, const std::vector<int64_t>& send_offsets,
                                T* recv, const std::vector<int64_t>& recv_rows,
                                const std::vector<int64_t>& recv_offsets, int64_t cols, plx_stream stream) {
  const std::vector<int64_t> sc = scaled(send_rows, cols), so = scaled(send_offsets, cols);
  const std::vector<int64_t> rc = scaled(recv_rows, cols), ro = scaled(recv_offsets, cols);
  int64_t send_extent = 1, recv_extent = 1;
  for (std::size_t r = 0; r < sc.size(); ++r) send_extent = std::max(send_extent, so[r] + sc[r]);
  for (std::size_t r = 0; r < rc.size(); ++r) recv_extent = std::max(recv_extent, ro[r] + rc[r]);
  DLTensor s = flat(send, send_extent), r = flat(recv, recv_extent);
  plx_request request = nullptr;
  check(host.all_to_all_v(host.ctx, g.group, &s, sc.data(), so.data(), &r, rc.data(), ro.data(), stream, &request));
  return request;
}

void wait_exchange(const plx_host_api& host, plx_request& request) {
  if (request == nullptr) return;
  plx_request pending = request;
  request = nullptr;
  check(host.request_wait(host.ctx, pending));
}

template <class T>
void to_expert_major(const ExchangeLayout& l, int64_t cols, const T* source_major, T* expert_major) {
  for (std::size_t c = 0; c < l.chunk_rows.size(); ++c)
    if (l.chunk_rows[c] > 0)
      std::memcpy(expert_major + l.expert_offset[c] * cols, source_major + l.source_offset[c] * cols,
                  sz(l.chunk_rows[c] * cols) * sizeof(T));
}

template <class T>
void to_source_major(const ExchangeLayout& l, int64_t cols, const T* expert_major, T* source_major) {
  for (std::size_t c = 0; c < l.chunk_rows.size(); ++c)
    if (l.chunk_rows[c] > 0)
      std::memcpy(source_major + l.source_offset[c] * cols, expert_major + l.expert_offset[c] * cols,
                  sz(l.chunk_rows[c] * cols) * sizeof(T));
}

#define PLEXUS_MOE_EXCHANGE(T)                                                                                \
  template plx_request start_rows_exchange<T>(const plx_host_api&, const ExpertGroup&, const T*,               \
                                              const std::vector<int64_t>&, const std::vector<int64_t>&, T*,    \
                                              const std::vector<int64_t>&, const std::vector<int64_t>&,        \
                                              int64_t, plx_stream);                                            \
  template void to_expert_major<T>(const ExchangeLayout&, int64_t, const T*, T*);                             \
  template void to_source_major<T>(const ExchangeLayout&, int64_t, const T*, T*);
PLEXUS_MOE_EXCHANGE(float)
PLEXUS_MOE_EXCHANGE(double)
#undef PLEXUS_MOE_EXCHANGE

}  // namespace plexus::moe
