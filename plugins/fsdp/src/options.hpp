// The fsdp component's options: which strategy, and whether prefetch hints start gathers.
#pragma once

#include <string>

#include "plexus/host.h"

namespace fsdp {

enum class Strategy { no_shard, optim, optim_grads, optim_grads_params };

struct Options {
  Strategy strategy = Strategy::no_shard;
  bool prefetch = true;
};

const char* strategy_name(Strategy s) noexcept;

// Reads the validated options node (defaults apply to absent keys, so a node the host did not
// fill works too). An unknown strategy is refused naming the key and the nearest valid value.
Options read_options(plx_config config);

}  // namespace fsdp
