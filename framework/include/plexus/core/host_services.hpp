// The host-services table handed to plugins (plx_host_api), and the per-thread record of the
// last error a plugin reported through it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/json/value.hpp>

#include "plexus/host.h"

namespace plexus {

class Logger;

class HostServices {
 public:
  HostServices();
  ~HostServices();
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;

  // A host table for one plugin: log lines and errors are attributed to `plugin_name`.
  // The table stays valid as long as this HostServices.
  const plx_host_api* table_for(const std::string& plugin_name);

  // Where plx_host_api.report_metric values go: (plugin, name, value). Until a sink is set
  // (the trainer sets one that writes its metrics stream), values are logged at debug level.
  using MetricSink = std::function<void(const std::string& plugin, const std::string& name, double value)>;
  void set_metric_sink(MetricSink sink);

  // Renames the plugin a table speaks for (known only once its descriptor was read).
  void rename(const plx_host_api* table, const std::string& plugin_name);

  // The message of the last set_error on this thread, then cleared ("" when none).
  static std::string take_last_error();
  static void clear_last_error();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A config node handed to a component (plx_config). It keeps the value alive and gives strings
// and child nodes stable addresses for as long as the node lives.
class ConfigHandle {
 public:
  ConfigHandle(boost::json::value value, std::string path);
  ~ConfigHandle();
  ConfigHandle(const ConfigHandle&) = delete;
  ConfigHandle& operator=(const ConfigHandle&) = delete;
  plx_config get() noexcept;

  struct Node;  // defined in the implementation; public so host functions can reach it

 private:
  std::unique_ptr<boost::json::value> owned_;
  std::unique_ptr<Node> root_;
};

}  // namespace plexus
