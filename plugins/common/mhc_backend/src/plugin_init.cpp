#include "plexus_mhc_backend/plugin_init.hpp"

#include "plexus_kernels/threading.hpp"

namespace plexus::mhc_backend {

void init_plugin(plexus::sdk::Host host) {
  if (!plexus::kernels::init_for_plugin())
    host.warn(
        "could not pin the OpenMP runtime in memory: unloading this plugin may crash its worker threads");
}

}  // namespace plexus::mhc_backend
