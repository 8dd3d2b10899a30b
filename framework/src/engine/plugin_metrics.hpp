// The values plugins report through plx_host_api.report_metric during a step (e.g. an MoE
// layer's auxiliary losses and tokens per expert), collected for that step's metrics record as
// "<plugin>/<name>": the mean of the values reported under a name since the previous step (one
// per microbatch for a layer that reports once per training forward).
#pragma once

#include <boost/json.hpp>

#include <map>
#include <mutex>
#include <string>

#include "plexus/core/host_services.hpp"

namespace plexus {

class PluginMetrics {
 public:
  // Installs this collector as the host's metric sink, until destroyed.
  explicit PluginMetrics(HostServices& services);
  ~PluginMetrics();
  PluginMetrics(const PluginMetrics&) = delete;
  PluginMetrics& operator=(const PluginMetrics&) = delete;

  // Adds the step's values (the mean under each name) to `record` and starts the next step.
  void take_step(boost::json::object& record);

 private:
  struct Sum {
    double total = 0;
    int64_t count = 0;
  };
  HostServices* services_;
  std::mutex mutex_;  // report_metric may be called from any thread
  std::map<std::string, Sum> sums_;
};

}  // namespace plexus
