#include "plexus_schedule_overlap/stage_chains.hpp"

#include "plexus/cpp/error.hpp"

namespace plexus::schedule_overlap {

StageKinds stage_kinds(const plx_schedule_env& env) {
  StageKinds comm(env.num_units);
  for (uint32_t unit = 0; unit < env.num_units; ++unit) {
    uint32_t stages = 0;
    plexus::sdk::check_host(env.unit_num_stages(env.ctx, unit, &stages));
    for (uint32_t stage = 0; stage < stages; ++stage) {
      plx_stage_info info{};
      info.struct_size = sizeof(info);
      plexus::sdk::check_host(env.unit_stage(env.ctx, unit, stage, &info));
      comm[unit].push_back(info.kind == PLX_STAGE_COMM);
    }
  }
  return comm;
}

std::vector<Node> forward_chain(uint32_t mb, const StageKinds& kinds, uint32_t first, uint32_t count) {
  std::vector<Node> chain;
  for (uint32_t unit = first; unit < first + count; ++unit)
    for (uint32_t stage = 0; stage < kinds[unit].size(); ++stage)
      chain.push_back(Node{Pass::forward, mb, unit, stage, kinds[unit][stage]});
  return chain;
}

std::vector<Node> backward_chain(uint32_t mb, const StageKinds& kinds, uint32_t first, uint32_t count) {
  std::vector<Node> chain;
  for (uint32_t unit = first + count; unit-- > first;)
    for (auto stage = static_cast<uint32_t>(kinds[unit].size()); stage-- > 0;)
      chain.push_back(Node{Pass::backward, mb, unit, stage, kinds[unit][stage]});
  return chain;
}

bool ask_for_split_weights(const plx_schedule_env& env) {
  if (!PLX_HAS_FIELD(&env, plx_schedule_env, split_weight_gradients) ||
      env.split_weight_gradients == nullptr || env.backward_weights == nullptr)
    return false;
  plexus::sdk::check_host(env.split_weight_gradients(env.ctx));
  return true;
}

void run_node(const plx_schedule_env& env, const Node& node) {
  const plx_stream stream = node.comm ? env.comm_stream : env.compute_stream;
  switch (node.pass) {
    case Pass::forward:
      plexus::sdk::check_host(env.forward(env.ctx, node.microbatch, node.unit, node.stage, stream));
      break;
    case Pass::backward:
      plexus::sdk::check_host(env.backward(env.ctx, node.microbatch, node.unit, node.stage, stream));
      break;
    case Pass::weights:
      plexus::sdk::check_host(env.backward_weights(env.ctx, node.microbatch, node.unit, env.compute_stream));
      break;
  }
}

}  // namespace plexus::schedule_overlap
