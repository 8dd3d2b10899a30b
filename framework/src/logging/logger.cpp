#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

#include "plexus/core/logging.hpp"

namespace plexus {
namespace {
std::atomic<int32_t> g_level{static_cast<int32_t>(LogLevel::info)};
std::atomic<int> g_rank{-1};
std::mutex g_write_mutex;  // keeps lines from different threads whole

char level_letter(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return 'D';
    case LogLevel::info: return 'I';
    case LogLevel::warn: return 'W';
    case LogLevel::error: return 'E';
  }
  return '?';
}
}  // namespace

Logger& Logger::global() {
  static Logger logger;
  return logger;
}

void Logger::set_level(LogLevel level) noexcept { g_level = static_cast<int32_t>(level); }
LogLevel Logger::level() const noexcept { return static_cast<LogLevel>(g_level.load()); }
void Logger::set_rank(int rank) noexcept { g_rank = rank; }

void Logger::log(LogLevel level, std::string_view source, std::string_view message) const {
  if (!enabled(level)) return;
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm local{};
  localtime_r(&seconds, &local);
  char stamp[16];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &local);
  std::string line = "[plexus ";
  line += level_letter(level);
  line += ' ';
  line += stamp;
  line += '.';
  const std::string ms = std::to_string(millis);
  line.append(3 - ms.size(), '0').append(ms);
  if (const int rank = g_rank.load(); rank >= 0) line += " r" + std::to_string(rank);
  if (!source.empty()) line.append(" ").append(source);
  line.append("] ").append(message).append("\n");
  const std::lock_guard lock(g_write_mutex);
  std::fputs(line.c_str(), stderr);
}

}  // namespace plexus
