// The component mamba.mixer: the Mamba-2 layer as a sublayer function F (pre-norm included; the
// stack adds the residual or mHC around it). One input, the hidden states [batch, seq,
// hidden_size] in float32 or float64; one output of the same shape and dtype; one compute stage.
#pragma once

#include "plexus/plugin.h"

namespace plexus::mamba {

const plx_component_desc* mixer_component();

}  // namespace plexus::mamba
