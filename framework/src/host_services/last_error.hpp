// The per-thread record of the last error reported through plx_host_api.set_error.
#pragma once

#include <string>

#include "plexus/abi.h"

namespace plexus::detail {

void set_last_error(plx_status status, std::string message);
// Reports status + message and returns status, for host functions failing on a plugin's call.
plx_status fail(plx_status status, std::string message);

}  // namespace plexus::detail
