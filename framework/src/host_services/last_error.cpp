#include "host_services/last_error.hpp"

#include <utility>

#include "plexus/core/host_services.hpp"

namespace plexus {
namespace {
// Per thread because components may be called from several threads at once, and the message
// belongs to the call that failed on that thread.
thread_local std::string t_last_error;
}  // namespace

namespace detail {
void set_last_error(plx_status /*status*/, std::string message) { t_last_error = std::move(message); }
plx_status fail(plx_status status, std::string message) {
  set_last_error(status, std::move(message));
  return status;
}
}  // namespace detail

std::string HostServices::take_last_error() {
  std::string message = std::move(t_last_error);
  t_last_error.clear();
  return message;
}

void HostServices::clear_last_error() { t_last_error.clear(); }

}  // namespace plexus
