// StopSignals with real signals: the first SIGTERM or SIGINT is only noted and the process goes
// on; a second one ends it by that signal; a blocking read interrupted by the first is restarted
// (SA_RESTART), not failed with EINTR; the dispositions found are restored. Cases that end a
// process run in a forked child.
#define BOOST_TEST_MODULE stop_signals
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "plexus/core/engine/stop_signals.hpp"

using plexus::StopSignals;

namespace {

// Runs `body` in a forked child and returns its raw wait status. The child exits 0 when body
// returns.
template <typename Body>
int in_child(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

std::atomic<int> g_custom_calls{0};
extern "C" void custom_handler(int) {
  g_custom_calls.fetch_add(1);
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_first_signal_is_noted_and_the_process_goes_on) {
  const StopSignals stop;
  BOOST_TEST(StopSignals::received() == 0);
  BOOST_TEST_REQUIRE(::raise(SIGTERM) == 0);  // delivered before raise returns
  BOOST_TEST(StopSignals::received() == SIGTERM);
}

BOOST_AUTO_TEST_CASE(an_installation_starts_with_nothing_received) {
  {
    const StopSignals stop;
    ::raise(SIGINT);
    BOOST_TEST(StopSignals::received() == SIGINT);
  }
  const StopSignals again;
  BOOST_TEST(StopSignals::received() == 0);
}

BOOST_AUTO_TEST_CASE(a_second_signal_ends_the_process_by_that_signal) {
  for (const auto& [first, second] : {std::pair{SIGTERM, SIGTERM}, std::pair{SIGINT, SIGINT},
                                      std::pair{SIGTERM, SIGINT}, std::pair{SIGINT, SIGTERM}}) {
    const int status = in_child([first = first, second = second] {
      const StopSignals stop;
      ::raise(first);
      if (StopSignals::received() != first) ::_exit(2);
      ::raise(second);
      ::_exit(3);  // not reached when the second signal ended the process
    });
    BOOST_TEST_INFO(plexus::signal_name(first) << " then " << plexus::signal_name(second));
    BOOST_TEST_REQUIRE(WIFSIGNALED(status), "exited with " << WEXITSTATUS(status));
    BOOST_TEST(WTERMSIG(status) == second);
  }
}

// What a child writes on stderr while `body` runs, and its raw wait status.
template <typename Body>
std::pair<std::string, int> stderr_of_child(Body body) {
  int fds[2];
  BOOST_TEST_REQUIRE(::pipe(fds) == 0);
  const int status = in_child([&] {
    ::dup2(fds[1], STDERR_FILENO);
    body();
  });
  ::close(fds[1]);
  std::string text;
  char buffer[256];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;)
    text.append(buffer, static_cast<std::size_t>(n));
  ::close(fds[0]);
  return {text, status};
}

BOOST_AUTO_TEST_CASE(the_first_signal_is_acknowledged_at_once_and_only_once) {
  const auto [text, status] = stderr_of_child([] {
    const StopSignals stop;
    ::raise(SIGINT);
  });
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(
      text ==
      "SIGINT received: finishing the current step, then writing a checkpoint; a second signal stops at "
      "once, without one\n");
  const auto [quiet, quiet_status] = stderr_of_child([] {
    const StopSignals stop(false);  // another rank of the job speaks for it
    ::raise(SIGTERM);
  });
  BOOST_TEST(WIFEXITED(quiet_status));
  BOOST_TEST(quiet.empty(), quiet);
  const auto [killed, killed_status] = stderr_of_child([] {
    const StopSignals stop(false);
    ::raise(SIGTERM);
    ::raise(SIGTERM);
  });
  BOOST_TEST(WIFSIGNALED(killed_status));
  BOOST_TEST(killed == "\nsecond stop signal (SIGTERM): stopping at once, without a checkpoint\n");
}

BOOST_AUTO_TEST_CASE(a_blocking_read_is_restarted_not_interrupted) {
  // The signal reaches the reading thread while it waits in read(); with SA_RESTART the read
  // goes on waiting and returns the byte written afterwards, where it would fail with EINTR.
  int fds[2];
  BOOST_TEST_REQUIRE(::pipe(fds) == 0);
  const StopSignals stop;
  const pthread_t reader = ::pthread_self();
  std::thread helper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::pthread_kill(reader, SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const char byte = 'x';
    (void)!::write(fds[1], &byte, 1);
  });
  char got = 0;
  const ssize_t n = ::read(fds[0], &got, 1);
  const int error = errno;
  helper.join();
  ::close(fds[0]);
  ::close(fds[1]);
  BOOST_TEST(n == 1, "read returned " << n << " (errno " << error << ")");
  BOOST_TEST(got == 'x');
  BOOST_TEST(StopSignals::received() == SIGTERM);
}

BOOST_AUTO_TEST_CASE(the_dispositions_found_are_restored) {
  struct sigaction custom {
  }, previous_term{}, previous_int{};
  custom.sa_handler = &custom_handler;
  sigemptyset(&custom.sa_mask);
  BOOST_TEST_REQUIRE(::sigaction(SIGTERM, &custom, &previous_term) == 0);
  BOOST_TEST_REQUIRE(::sigaction(SIGINT, &custom, &previous_int) == 0);
  {
    const StopSignals stop;
    ::raise(SIGTERM);
    BOOST_TEST(g_custom_calls.load() == 0);  // ours, not the custom one
  }
  ::raise(SIGTERM);
  ::raise(SIGINT);
  BOOST_TEST(g_custom_calls.load() == 2);
  ::sigaction(SIGTERM, &previous_term, nullptr);
  ::sigaction(SIGINT, &previous_int, nullptr);
}

BOOST_AUTO_TEST_CASE(a_signal_ignored_at_start_stays_ignored) {
  // As a shell script's `plexus-train ... &` starts it: SIGINT ignored.
  const int status = in_child([] {
    ::signal(SIGINT, SIG_IGN);
    {
      const StopSignals stop;
      ::raise(SIGINT);
      ::raise(SIGINT);  // would end the process were it handled
      if (StopSignals::received() != 0) ::_exit(2);
      ::raise(SIGTERM);  // SIGTERM is handled as usual
      if (StopSignals::received() != SIGTERM) ::_exit(3);
    }
    struct sigaction after {};
    ::sigaction(SIGINT, nullptr, &after);
    if (after.sa_handler != SIG_IGN) ::_exit(4);
  });
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
}

BOOST_AUTO_TEST_CASE(one_installation_at_a_time) {
  const StopSignals stop;
  BOOST_CHECK_THROW(StopSignals(), std::logic_error);
  ::raise(SIGTERM);  // the first is still installed and working
  BOOST_TEST(StopSignals::received() == SIGTERM);
}

BOOST_AUTO_TEST_CASE(signal_names) {
  BOOST_TEST(plexus::signal_name(SIGTERM) == "SIGTERM");
  BOOST_TEST(plexus::signal_name(SIGINT) == "SIGINT");
  BOOST_TEST(plexus::signal_name(0) == "signal 0");
}
