#include "plugin_host/kinds.hpp"

#include <array>

#include "plexus/comm.h"
#include "plexus/data_parallel.h"
#include "plexus/core/plugin_host.hpp"
#include "plexus/fusion.h"
#include "plexus/layer.h"
#include "plexus/scheduler.h"
#include "plexus/stack.h"
#include "plexus/topology.h"

#define PLX_REQUIRED(type, field) RequiredField{#field, PLX_FIELD_END(type, field)}

namespace plexus {
namespace detail {
namespace {

const std::array<KindInfo, 7>& kinds() {
  static const std::array<KindInfo, 7> table = {{
      {PLX_KIND_LAYER, "layer", sizeof(plx_layer_v1),
       {PLX_REQUIRED(plx_layer_v1, create), PLX_REQUIRED(plx_layer_v1, destroy),
        PLX_REQUIRED(plx_layer_v1, get_info), PLX_REQUIRED(plx_layer_v1, get_param),
        PLX_REQUIRED(plx_layer_v1, get_stage), PLX_REQUIRED(plx_layer_v1, output_desc),
        PLX_REQUIRED(plx_layer_v1, state_create), PLX_REQUIRED(plx_layer_v1, state_destroy),
        PLX_REQUIRED(plx_layer_v1, forward), PLX_REQUIRED(plx_layer_v1, backward)}},
      {PLX_KIND_FUSION_BACKEND, "fusion_backend", sizeof(plx_fusion_backend_v1),
       {PLX_REQUIRED(plx_fusion_backend_v1, family), PLX_REQUIRED(plx_fusion_backend_v1, family_table)}},
      {PLX_KIND_SCHEDULER, "scheduler", sizeof(plx_scheduler_v1),
       {PLX_REQUIRED(plx_scheduler_v1, create), PLX_REQUIRED(plx_scheduler_v1, destroy),
        PLX_REQUIRED(plx_scheduler_v1, run_step)}},
      {PLX_KIND_TOPOLOGY, "topology", sizeof(plx_topology_v1), {PLX_REQUIRED(plx_topology_v1, build)}},
      {PLX_KIND_COMM, "comm", sizeof(plx_comm_v1),
       {PLX_REQUIRED(plx_comm_v1, init), PLX_REQUIRED(plx_comm_v1, destroy),
        PLX_REQUIRED(plx_comm_v1, rank_size), PLX_REQUIRED(plx_comm_v1, split),
        PLX_REQUIRED(plx_comm_v1, all_reduce), PLX_REQUIRED(plx_comm_v1, all_gather),
        PLX_REQUIRED(plx_comm_v1, reduce_scatter), PLX_REQUIRED(plx_comm_v1, all_to_all_v),
        PLX_REQUIRED(plx_comm_v1, broadcast), PLX_REQUIRED(plx_comm_v1, send),
        PLX_REQUIRED(plx_comm_v1, recv), PLX_REQUIRED(plx_comm_v1, barrier),
        PLX_REQUIRED(plx_comm_v1, wait), PLX_REQUIRED(plx_comm_v1, test)}},
      {PLX_KIND_STACK, "stack", sizeof(plx_stack_v1),
       {PLX_REQUIRED(plx_stack_v1, create), PLX_REQUIRED(plx_stack_v1, destroy),
        PLX_REQUIRED(plx_stack_v1, describe)}},
      {PLX_KIND_DATA_PARALLEL, "data_parallel", sizeof(plx_data_parallel_v1),
       {PLX_REQUIRED(plx_data_parallel_v1, create), PLX_REQUIRED(plx_data_parallel_v1, destroy),
        PLX_REQUIRED(plx_data_parallel_v1, layout), PLX_REQUIRED(plx_data_parallel_v1, acquire),
        PLX_REQUIRED(plx_data_parallel_v1, release), PLX_REQUIRED(plx_data_parallel_v1, prefetch),
        PLX_REQUIRED(plx_data_parallel_v1, begin_step), PLX_REQUIRED(plx_data_parallel_v1, grads),
        PLX_REQUIRED(plx_data_parallel_v1, grads_ready), PLX_REQUIRED(plx_data_parallel_v1, finish_grads),
        PLX_REQUIRED(plx_data_parallel_v1, shard), PLX_REQUIRED(plx_data_parallel_v1, after_update),
        PLX_REQUIRED(plx_data_parallel_v1, gather), PLX_REQUIRED(plx_data_parallel_v1, memory)}},
  }};
  return table;
}

}  // namespace

const KindInfo* kind_info(uint32_t kind) noexcept {
  for (const KindInfo& info : kinds())
    if (info.kind == kind) return &info;
  return nullptr;
}

std::string known_kinds_list() {
  std::string list;
  for (const KindInfo& info : kinds()) {
    if (!list.empty()) list += ", ";
    list += std::string(info.name) + " (" + std::to_string(info.kind) + ")";
  }
  return list;
}

}  // namespace detail

const char* kind_name(uint32_t kind) noexcept {
  const detail::KindInfo* info = detail::kind_info(kind);
  return info != nullptr ? info->name : "unknown";
}

std::optional<uint32_t> kind_from_name(std::string_view name) noexcept {
  for (uint32_t kind = 1; kind <= PLX_KIND_LAST; ++kind)
    if (name == kind_name(kind)) return kind;
  return std::nullopt;
}

}  // namespace plexus
