#include "engine/plugin_metrics.hpp"

namespace plexus {

PluginMetrics::PluginMetrics(HostServices& services) : services_(&services) {
  services_->set_metric_sink([this](const std::string& plugin, const std::string& name, double value) {
    const std::lock_guard lock(mutex_);
    Sum& s = sums_[plugin + "/" + name];
    s.total += value;
    ++s.count;
  });
}

PluginMetrics::~PluginMetrics() { services_->set_metric_sink(nullptr); }

void PluginMetrics::take_step(boost::json::object& record) {
  const std::lock_guard lock(mutex_);
  for (const auto& [name, s] : sums_) record[name] = s.total / static_cast<double>(s.count);
  sums_.clear();
}

}  // namespace plexus
