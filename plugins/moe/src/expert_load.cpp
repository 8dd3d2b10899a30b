#include "expert_load.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "plexus/cpp/error.hpp"

namespace plexus::moe {

void ExpertLoad::add(const std::vector<int64_t>& offsets) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t e = 0; e < counts_.size() && e + 1 < offsets.size(); ++e)
    counts_[e] += offsets[e + 1] - offsets[e];
}

std::vector<double> ExpertLoad::take_global(const plx_host_api& host, const Reduce& reduce,
                                            const plexus::sdk::Group& sequence) {
  std::vector<double> counts;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    counts.assign(counts_.begin(), counts_.end());
    std::fill(counts_.begin(), counts_.end(), 0);
  }
  if (sequence.size() > 1) {  // host memory: sequence parallelism runs on the CPU
    int64_t extent = static_cast<int64_t>(counts.size());
    DLTensor t{counts.data(), DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 64, 1}, &extent, nullptr, 0};
    sequence.all_reduce(t);
  }
  if (host.group_get == nullptr || host.group_rank == nullptr || host.all_reduce == nullptr) return counts;
  plx_group dp = nullptr;
  if (host.group_get(host.ctx, "dp", &dp) != PLX_OK || dp == nullptr) return counts;
  int32_t rank = 0, size = 1;
  if (host.group_rank(host.ctx, dp, &rank, &size) != PLX_OK || size <= 1) return counts;
  if (reduce) {
    reduce(dp, counts);
    return counts;
  }
  int64_t extent = static_cast<int64_t>(counts.size());
  DLTensor t{};
  t.data = counts.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLFloat, 64, 1};
  t.shape = &extent;
  const plx_status status = host.all_reduce(host.ctx, dp, &t, &t, PLX_REDUCE_SUM, nullptr, nullptr);
  if (status != PLX_OK) throw plexus::sdk::Error::from_host(status);
  return counts;
}

template <class T>
void update_expert_bias(T* bias, const std::vector<double>& counts, double rate) {
  if (counts.empty()) return;
  const double mean = std::accumulate(counts.begin(), counts.end(), 0.0) / static_cast<double>(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double sign = mean > counts[i] ? 1.0 : mean < counts[i] ? -1.0 : 0.0;
    bias[i] += static_cast<T>(rate * sign);
  }
}

template void update_expert_bias<float>(float*, const std::vector<double>&, double);
template void update_expert_bias<double>(double*, const std::vector<double>&, double);

}  // namespace plexus::moe
