// The exception types of the core. Every message is complete and user-facing: it names the
// file, plugin, component or config key involved and what was expected.
#pragma once

#include <stdexcept>
#include <string>

namespace plexus {

// A plugin could not be loaded, initialized or registered. The host is unaffected.
class PluginError : public std::runtime_error {
 public:
  PluginError(std::string file, const std::string& message)
      : std::runtime_error(message), file_(std::move(file)) {}
  const std::string& file() const noexcept { return file_; }

 private:
  std::string file_;
};

// A call into a loaded component returned an error status (including an exception that the
// plugin's C++ helpers caught at its boundary).
class ComponentCallError : public std::runtime_error {
 public:
  ComponentCallError(int status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  int status() const noexcept { return status_; }

 private:
  int status_;
};

}  // namespace plexus
