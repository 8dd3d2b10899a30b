#include <string>

#include "plexus/core/components.hpp"

namespace plexus {

void check_call(const Component& component, const char* operation, plx_status status) {
  if (status == PLX_OK) return;
  std::string message = HostServices::take_last_error();
  std::string text = component.name + " (" + kind_name(component.kind) + ", plugin '" + component.plugin->name +
                     "' from " + component.plugin->file.string() + "): " + operation + " failed: " +
                     plx_status_name(status);
  if (!message.empty()) text += ": " + message;
  throw ComponentCallError(status, text);
}

}  // namespace plexus
