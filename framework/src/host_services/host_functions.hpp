// The C functions behind plx_host_api, grouped by concern in host_*.cpp files.
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "plexus/host.h"

namespace plexus::distributed {
class Runtime;
}

namespace plexus::detail {

// The runtime whose groups plugins' group functions reach (nullptr: none running).
void set_comm_runtime(distributed::Runtime* runtime) noexcept;

// The metric sink shared by every plugin's table.
struct MetricsChannel {
  std::mutex mutex;
  std::function<void(const std::string&, const std::string&, double)> sink;
};

// Identifies the plugin behind a call: plx_host_api.ctx points to one of these.
struct PluginContext {
  std::string plugin_name;
  MetricsChannel* metrics = nullptr;
  plx_host_api api{};
};

void fill_logging_functions(plx_host_api& api);
void fill_config_functions(plx_host_api& api);
void fill_memory_functions(plx_host_api& api);
void fill_stream_functions(plx_host_api& api);
void fill_comm_functions(plx_host_api& api);
void fill_metric_functions(plx_host_api& api);

}  // namespace plexus::detail
