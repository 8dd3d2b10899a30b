#include "engine/mimo/mimo_schedule.hpp"

#include <algorithm>

namespace plexus {
namespace {

int64_t encoder_depth(const std::vector<MimoModule>& modules) {
  int64_t depth = 0;
  for (const MimoModule& m : modules)
    if (m.encoder) depth = std::max(depth, m.stages);
  return depth;
}

}  // namespace

int64_t mimo_pipeline_stages(const std::vector<MimoModule>& modules) {
  return encoder_depth(modules) + modules.back().stages;
}

int64_t mimo_pipeline_place(const std::vector<MimoModule>& modules, std::size_t module, int64_t stage) {
  const int64_t depth = encoder_depth(modules);
  const MimoModule& m = modules.at(module);
  return m.encoder ? depth - m.stages + stage : depth + stage;
}

std::vector<MimoOp> mimo_schedule(const std::vector<MimoModule>& modules, uint32_t microbatches,
                                  bool training) {
  std::vector<std::size_t> here;
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) here.push_back(m);
  std::vector<MimoOp> ops;
  const auto forward = [&](std::size_t m, uint32_t k) { ops.push_back({MimoOp::Kind::forward, m, k}); };
  const auto backward = [&](std::size_t m, uint32_t k) { ops.push_back({MimoOp::Kind::backward, m, k}); };
  if (here.size() != 1 || !training) {
    for (uint32_t k = 0; k < microbatches; ++k) {
      for (std::size_t m : here) forward(m, k);
      if (training)
        for (auto m = here.rbegin(); m != here.rend(); ++m) backward(*m, k);
    }
    return ops;
  }
  const std::size_t m = here.front();
  const int64_t after = mimo_pipeline_stages(modules) - mimo_pipeline_place(modules, m, modules[m].stage) - 1;
  const auto warmup = static_cast<uint32_t>(std::min<int64_t>(microbatches, after));
  for (uint32_t k = 0; k < warmup; ++k) forward(m, k);
  for (uint32_t k = 0; k + warmup < microbatches; ++k) {
    forward(m, k + warmup);
    backward(m, k);
  }
  for (uint32_t k = microbatches - warmup; k < microbatches; ++k) backward(m, k);
  return ops;
}

}  // namespace plexus
