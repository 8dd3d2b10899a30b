// The init hook of an in-tree mhc backend plugin whose CPU primitives run on plexus_kernels'
// threads: PLEXUS_PLUGIN_WITH_INIT(..., &plexus::mhc_backend::init_plugin, ...).
#pragma once

#include "plexus/cpp/host.hpp"

namespace plexus::mhc_backend {

// The loops run on OpenMP threads and the projection's GEMMs are single-threaded OpenBLAS calls
// (plexus_kernels' threading model): keeps OpenBLAS's own pool out of the way and pins the OpenMP
// runtime, so that unloading the plugin cannot unmap it under its parked worker threads (see
// plugins/common/kernels/README.md). Warns through the host when the runtime cannot be pinned.
void init_plugin(plexus::sdk::Host host);

}  // namespace plexus::mhc_backend
