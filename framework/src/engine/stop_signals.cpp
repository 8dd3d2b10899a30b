#include "plexus/core/engine/stop_signals.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace plexus {
namespace {

// Read and written from any thread and from the handler: lock-free, so async-signal-safe.
std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<bool> g_installed{false};
// What the handler writes on the first SIGTERM, SIGINT and SIGHUP: composed at installation,
// because the handler may not format or allocate. Empty: say nothing.
char g_announce_term[192];
char g_announce_int[192];
char g_announce_hup[192];

void compose(char (&text)[192], const char* name, bool on_terminal) {
  // On a terminal the progress line is live (no newline yet): start a line of our own.
  std::snprintf(
      text, sizeof text,
      "%s%s received: finishing the current step, then writing a checkpoint; a second signal stops at "
      "once, without one\n",
      on_terminal ? "\n" : "", name);
}

// The stop signals, each installed with the others held off while its handler runs.
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};

const char* announcement(int signal) noexcept {
  return signal == SIGINT ? g_announce_int : signal == SIGHUP ? g_announce_hup : g_announce_term;
}

void say(const char* text) noexcept {
  // write() is async-signal-safe; a short or failed write of a courtesy message is ignored.
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

extern "C" void on_stop_signal(int signal) {
  const int saved_errno = errno;
  if (signal == SIGHUP) {
    // A hangup means the terminal or session is gone, and with it, often, the reader of stdout
    // and stderr: a write to a pipe nobody reads would raise SIGPIPE and kill the process before
    // its checkpoint. Ignored, such writes fail with EPIPE instead (sigaction is async-signal-
    // safe); the disposition found at installation is restored with the others.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
  int none = 0;
  if (g_received.compare_exchange_strong(none, signal)) {  // the first: the trainer stops at its step's end
    say(announcement(signal));
    errno = saved_errno;
    return;
  }
  // The second: stop now. The default action of SIGTERM, SIGINT and SIGHUP ends the process with
  // that signal; the signal is blocked while its handler runs, so the re-raised one is delivered
  // as the handler returns.
  say(signal == SIGINT   ? "\nsecond stop signal (SIGINT): stopping at once, without a checkpoint\n"
      : signal == SIGHUP ? "\nsecond stop signal (SIGHUP): stopping at once, without a checkpoint\n"
                         : "\nsecond stop signal (SIGTERM): stopping at once, without a checkpoint\n");
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  ::sigaction(signal, &default_action, nullptr);
  ::raise(signal);
  errno = saved_errno;
}

void install(int signal, struct sigaction& previous) {
  if (::sigaction(signal, nullptr, &previous) != 0)
    throw std::system_error(errno, std::generic_category(),
                            "cannot read the disposition of " + signal_name(signal));
  // Ignored by whoever started the process (a shell script's `cmd &` ignores SIGINT, so that
  // Ctrl-C in the terminal reaches only the foreground job): it stays ignored.
  if ((previous.sa_flags & SA_SIGINFO) == 0 && previous.sa_handler == SIG_IGN) return;
  struct sigaction action {};
  action.sa_handler = &on_stop_signal;
  sigemptyset(&action.sa_mask);
  // The other stop signals are held off while the handler runs, so two arriving together are
  // still counted one after the other.
  for (const int other : kStopSignals)
    if (other != signal) sigaddset(&action.sa_mask, other);
  // Interrupted read/write/fsync calls are restarted instead of failing with EINTR: a
  // checkpoint being written when the signal arrives is completed.
  action.sa_flags = SA_RESTART;
  if (::sigaction(signal, &action, &previous) != 0)
    throw std::system_error(errno, std::generic_category(),
                            "cannot install the handler of " + signal_name(signal));
}

}  // namespace

StopSignals::StopSignals(bool announce) {
  if (g_installed.exchange(true)) throw std::logic_error("StopSignals: a handler is installed already");
  g_received.store(0);
  g_announce_term[0] = g_announce_int[0] = g_announce_hup[0] = '\0';
  if (announce) {
    const bool on_terminal = ::isatty(STDERR_FILENO) == 1;
    compose(g_announce_term, "SIGTERM", on_terminal);
    compose(g_announce_int, "SIGINT", on_terminal);
    compose(g_announce_hup, "SIGHUP", on_terminal);
  }
  // SIGPIPE's disposition, which the SIGHUP handler may change, is restored with the others.
  if (::sigaction(SIGPIPE, nullptr, &previous_pipe_) != 0) {
    g_installed.store(false);
    throw std::system_error(errno, std::generic_category(), "cannot read the disposition of SIGPIPE");
  }
  int installed = 0;
  try {
    install(SIGTERM, previous_term_);
    ++installed;
    install(SIGINT, previous_int_);
    ++installed;
    install(SIGHUP, previous_hup_);
  } catch (...) {
    if (installed >= 2) ::sigaction(SIGINT, &previous_int_, nullptr);
    if (installed >= 1) ::sigaction(SIGTERM, &previous_term_, nullptr);
    g_installed.store(false);
    throw;
  }
}

StopSignals::~StopSignals() {
  ::sigaction(SIGHUP, &previous_hup_, nullptr);
  ::sigaction(SIGINT, &previous_int_, nullptr);
  ::sigaction(SIGTERM, &previous_term_, nullptr);
  ::sigaction(SIGPIPE, &previous_pipe_, nullptr);
  g_installed.store(false);
}

int StopSignals::received() noexcept {
  return g_received.load();
}

std::string signal_name(int signal) {
  if (const char* abbreviation = ::sigabbrev_np(signal)) return std::string("SIG") + abbreviation;
  return "signal " + std::to_string(signal);
}

}  // namespace plexus
