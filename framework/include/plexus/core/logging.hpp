// Logging for the core and, through the host services, for plugins. One line per message on
// stderr: "[plexus I 12:00:01.123 r0 <source>] message". Thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace plexus {

enum class LogLevel : int32_t { debug = 0, info = 1, warn = 2, error = 3 };

class Logger {
 public:
  static Logger& global();
  void set_level(LogLevel level) noexcept;
  LogLevel level() const noexcept;
  void set_rank(int rank) noexcept;  // shown in every line once distributed runs start
  bool enabled(LogLevel level) const noexcept { return level >= this->level(); }
  void log(LogLevel level, std::string_view source, std::string_view message) const;

 private:
  Logger() = default;
};

inline void log_info(std::string_view source, std::string_view message) {
  Logger::global().log(LogLevel::info, source, message);
}
inline void log_warn(std::string_view source, std::string_view message) {
  Logger::global().log(LogLevel::warn, source, message);
}

}  // namespace plexus
