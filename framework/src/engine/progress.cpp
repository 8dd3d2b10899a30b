#include "engine/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace plexus::detail {

Progress::Progress(int64_t first_step, int64_t total_steps, int64_t log_interval)
    : terminal_(::isatty(STDERR_FILENO) == 1),
      first_step_(first_step),
      total_steps_(total_steps),
      log_interval_(log_interval),
      start_(std::chrono::steady_clock::now()) {}

std::string Progress::duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(text, sizeof text, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return text;
}

void Progress::step(int64_t step, double loss, double lr, double tokens_per_s, double gflops, double mfu) {
  const int64_t done = step + 1;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double per_step = elapsed / static_cast<double>(done - first_step_);
  const double eta = per_step * static_cast<double>(total_steps_ - done);
  char text[256];
  const int width = static_cast<int>(std::to_string(total_steps_).size());
  int n = std::snprintf(text, sizeof text, "step %*lld/%lld | loss %.4f | lr %.2e | %.0f tok/s", width,
                        static_cast<long long>(done), static_cast<long long>(total_steps_), loss, lr,
                        tokens_per_s);
  if (gflops >= 0)
    n += std::snprintf(text + n, sizeof text - static_cast<std::size_t>(n), " | %.1f GFLOP/s", gflops);
  if (mfu >= 0)
    n += std::snprintf(text + n, sizeof text - static_cast<std::size_t>(n), " | MFU %.1f%%", 100 * mfu);
  std::snprintf(text + n, sizeof text - static_cast<std::size_t>(n), " | elapsed %s | ETA %s",
                duration(elapsed).c_str(), duration(eta).c_str());
  if (terminal_) {
    std::fprintf(stderr, "\r\033[K%s", text);
    live_line_ = true;
  } else if (done % log_interval_ == 0 || done == total_steps_ || done == first_step_ + 1) {
    std::fprintf(stderr, "%s\n", text);
  }
  std::fflush(stderr);
}

void Progress::line(const std::string& text) {
  if (live_line_) std::fputs("\r\033[K", stderr);
  live_line_ = false;
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (live_line_) std::fputc('\n', stderr);
  live_line_ = false;
}

}  // namespace plexus::detail
