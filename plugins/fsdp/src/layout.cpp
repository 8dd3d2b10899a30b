#include "layout.hpp"

namespace fsdp {

plx_dp_layout plan_layout(Strategy mode, int64_t numel, int32_t rank, int32_t size) noexcept {
  plx_dp_layout l{};
  l.struct_size = sizeof(l);
  if (mode == Strategy::no_shard) {
    l.flags = 0;
    l.shard_offset = 0;
    l.shard_numel = numel;
    l.padded_numel = numel;
    return l;
  }
  const int64_t quantum = kShardAlignment * size;
  l.padded_numel = (numel + quantum - 1) / quantum * quantum;
  l.shard_numel = l.padded_numel / size;
  l.shard_offset = l.shard_numel * rank;
  l.flags = PLX_DP_OPTIM_SHARDED;
  if (mode == Strategy::optim_grads || mode == Strategy::optim_grads_params) l.flags |= PLX_DP_GRADS_SHARDED;
  if (mode == Strategy::optim_grads_params) l.flags |= PLX_DP_PARAMS_SHARDED;
  return l;
}

}  // namespace fsdp
