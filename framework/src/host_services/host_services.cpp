#include "plexus/core/host_services.hpp"

#include <deque>
#include <memory>
#include <mutex>

#include "host_services/host_functions.hpp"

namespace plexus {

struct HostServices::Impl {
  std::mutex mutex;
  detail::MetricsChannel metrics;
  std::deque<std::unique_ptr<detail::PluginContext>> contexts;  // stable addresses
};

HostServices::HostServices() : impl_(std::make_unique<Impl>()) {}
HostServices::~HostServices() = default;

const plx_host_api* HostServices::table_for(const std::string& plugin_name) {
  auto context = std::make_unique<detail::PluginContext>();
  context->plugin_name = plugin_name;
  context->metrics = &impl_->metrics;
  plx_host_api& api = context->api;
  api.struct_size = sizeof(plx_host_api);
  api.abi_version = PLX_ABI_VERSION;
  api.ctx = context.get();
  detail::fill_logging_functions(api);
  detail::fill_config_functions(api);
  detail::fill_memory_functions(api);
  detail::fill_stream_functions(api);
  detail::fill_comm_functions(api);
  detail::fill_metric_functions(api);
  const std::lock_guard lock(impl_->mutex);
  impl_->contexts.push_back(std::move(context));
  return &impl_->contexts.back()->api;
}

void HostServices::set_metric_sink(MetricSink sink) {
  const std::lock_guard lock(impl_->metrics.mutex);
  impl_->metrics.sink = std::move(sink);
}

void HostServices::rename(const plx_host_api* table, const std::string& plugin_name) {
  const std::lock_guard lock(impl_->mutex);
  static_cast<detail::PluginContext*>(table->ctx)->plugin_name = plugin_name;
}

}  // namespace plexus
