// Logging and error reporting for plugins.
#include <string>

#include "host_services/host_functions.hpp"
#include "host_services/last_error.hpp"
#include "plexus/core/logging.hpp"

namespace plexus::detail {
namespace {

const std::string& plugin_of(void* ctx) { return static_cast<PluginContext*>(ctx)->plugin_name; }

LogLevel clamp_level(int32_t level) {
  if (level <= PLX_LOG_DEBUG) return LogLevel::debug;
  if (level >= PLX_LOG_ERROR) return LogLevel::error;
  return static_cast<LogLevel>(level);
}

void host_log(void* ctx, int32_t level, const char* message) {
  Logger::global().log(clamp_level(level), plugin_of(ctx), message != nullptr ? message : "");
}

int32_t host_log_level(void* /*ctx*/) { return static_cast<int32_t>(Logger::global().level()); }

void host_set_error(void* /*ctx*/, plx_status status, const char* message) {
  set_last_error(status, message != nullptr ? message : "");
}

}  // namespace

void fill_logging_functions(plx_host_api& api) {
  api.log = &host_log;
  api.log_level = &host_log_level;
  api.set_error = &host_set_error;
}

}  // namespace plexus::detail
