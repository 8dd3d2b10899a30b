// moe.layer: the component table of the MoE sublayer.
#pragma once

#include "plexus/plugin.h"

namespace plexus::moe {
const plx_component_desc* layer_component();
}  // namespace plexus::moe
