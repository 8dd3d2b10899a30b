// Metrics from plugins (ABI 1.1): forwarded to the run's metric sink.
#include <string>

#include "host_services/host_functions.hpp"
#include "plexus/core/logging.hpp"

namespace plexus::detail {
namespace {

void report_metric(void* ctx, const char* name, double value) {
  auto* context = static_cast<PluginContext*>(ctx);
  const std::string metric = name != nullptr ? name : "";
  const std::lock_guard lock(context->metrics->mutex);
  if (context->metrics->sink) {
    context->metrics->sink(context->plugin_name, metric, value);
  } else {
    Logger::global().log(LogLevel::debug, context->plugin_name, "metric " + metric + " = " + std::to_string(value));
  }
}

}  // namespace

void fill_metric_functions(plx_host_api& api) { api.report_metric = &report_metric; }

}  // namespace plexus::detail
