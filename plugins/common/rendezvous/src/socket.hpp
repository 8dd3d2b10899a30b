// The POSIX layer of the rendezvous: an owning socket handle, the listening and connecting
// sockets, and reads and writes bounded by a deadline. Every socket is non-blocking and
// close-on-exec; waits go through poll(), so no call can outlive its deadline.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace plexus::rendezvous::detail {

using Clock = std::chrono::steady_clock;

// Owns one file descriptor; closes it when destroyed. Move-only.
class Socket {
 public:
  Socket() noexcept = default;
  explicit Socket(int fd) noexcept : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept;

 private:
  int fd_ = -1;
};

// "127.0.0.1:29500", "[fe80::1]:29500", "node07:29500".
std::string endpoint(std::string_view address, uint16_t port);
// The numeric "address:port" of a socket address (for naming where a peer connected from).
std::string endpoint(const sockaddr* address, socklen_t length);

// Milliseconds until `deadline` for poll(): 0 once it has passed, rounded up, at most `cap_ms`.
int poll_timeout_ms(Clock::time_point deadline, int cap_ms = 1000) noexcept;

// A non-blocking listening socket on address:port with SO_REUSEADDR (so a job restarted at once
// can bind while the previous one's connections sit in TIME_WAIT). The address is bound when it
// is one of this host's; when it is not (or does not resolve here), the wildcard address is.
// Throws Error(network) naming address, port and the reason (e.g. the port is in use).
Socket listen_on(const std::string& address, uint16_t port);

// One attempt to connect to address:port within `attempt_deadline`. On failure the socket is
// empty and `why` says what happened ("connection refused", "cannot resolve 'x': ...").
Socket try_connect(const std::string& address, uint16_t port, Clock::time_point attempt_deadline,
                   std::string& why);

// The outcome of a bounded read or write.
struct IoStatus {
  enum Kind { ok, timeout, closed, failed } kind = ok;
  int error = 0;  // errno for `failed`
  std::string describe() const;
};

IoStatus send_all(int fd, const uint8_t* data, std::size_t size, Clock::time_point deadline);
IoStatus recv_exact(int fd, uint8_t* data, std::size_t size, Clock::time_point deadline);

}  // namespace plexus::rendezvous::detail
