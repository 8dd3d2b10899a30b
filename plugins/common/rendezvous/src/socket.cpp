#include "socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "plexus_rendezvous/rendezvous.hpp"

namespace plexus::rendezvous::detail {
namespace {

// getaddrinfo's list, freed on every path.
struct AddrInfoDeleter {
  void operator()(addrinfo* list) const noexcept { ::freeaddrinfo(list); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Resolves address:port for a TCP socket; on failure returns null and sets `why`.
AddrInfoList resolve(const std::string& address, uint16_t port, bool passive, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(address.empty() ? nullptr : address.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    why =
        "cannot resolve '" + address + "': " + (rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc));
    return nullptr;
  }
  return AddrInfoList(list);
}

std::string errno_text(int error) {
  return std::strerror(error);
}

// True when a connect() "succeeded" by connecting the socket to itself: with no listener on a
// local port in the ephemeral range, the kernel may pick that very port as the source port
// (TCP simultaneous open). Such a socket would read back its own hello.
bool connected_to_itself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}

// Binds and listens on one address; returns an empty socket and sets `error` on failure.
Socket bind_and_listen(const sockaddr* address, socklen_t length, int family, int& error) {
  Socket s(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s) {
    error = errno;
    return Socket();
  }
  const int one = 1;
  if (::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    error = errno;
    return Socket();
  }
  if (family == AF_INET6) {
    const int zero = 0;  // the IPv6 wildcard also accepts IPv4 peers
    static_cast<void>(::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)));
  }
  if (::bind(s.fd(), address, length) != 0 || ::listen(s.fd(), SOMAXCONN) != 0) {
    error = errno;
    return Socket();
  }
  return s;
}

}  // namespace

void Socket::reset() noexcept {
  if (fd_ >= 0) static_cast<void>(::close(fd_));
  fd_ = -1;
}

std::string endpoint(std::string_view address, uint16_t port) {
  const bool ipv6 = address.find(':') != std::string_view::npos;
  return (ipv6 ? '[' + std::string(address) + ']' : std::string(address)) + ":" + std::to_string(port);
}

std::string endpoint(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST] = {};
  char service[NI_MAXSERV] = {};
  if (::getnameinfo(address, length, host, sizeof(host), service, sizeof(service),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown address";
  return endpoint(host, static_cast<uint16_t>(std::atoi(service)));
}

int poll_timeout_ms(Clock::time_point deadline, int cap_ms) noexcept {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > cap_ms ? cap_ms : static_cast<int>(ms);
}

Socket listen_on(const std::string& address, uint16_t port) {
  const std::string where = endpoint(address.empty() ? "*" : address, port);
  std::string why;
  const AddrInfoList list = resolve(address, port, /*passive=*/true, why);
  int error = 0;
  int family = AF_INET;
  for (const addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    family = a->ai_family;
    Socket s = bind_and_listen(a->ai_addr, a->ai_addrlen, a->ai_family, error);
    if (s) return s;
    if (error == EADDRINUSE) break;
  }
  // Not one of this host's addresses (e.g. a name behind NAT), or not resolvable here: listen on
  // every interface of the address's family instead.
  if (error != EADDRINUSE) {
    sockaddr_storage any{};
    socklen_t length = 0;
    if (family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&any);
      in6->sin6_family = AF_INET6;
      in6->sin6_addr = in6addr_any;
      in6->sin6_port = htons(port);
      length = sizeof(sockaddr_in6);
    } else {
      auto* in4 = reinterpret_cast<sockaddr_in*>(&any);
      in4->sin_family = AF_INET;
      in4->sin_addr.s_addr = htonl(INADDR_ANY);
      in4->sin_port = htons(port);
      length = sizeof(sockaddr_in);
    }
    Socket s = bind_and_listen(reinterpret_cast<const sockaddr*>(&any), length, family, error);
    if (s) return s;
  }
  std::string hint;
  if (error == EADDRINUSE)
    hint = " (another process, perhaps an earlier job, holds this port: choose another port)";
  if (error == EACCES) hint = " (ports below 1024 need privileges: choose another port)";
  throw Error(Failure::network, "rank 0 cannot listen on " + where + ": " + errno_text(error) + hint);
}

Socket try_connect(const std::string& address, uint16_t port, Clock::time_point attempt_deadline,
                   std::string& why) {
  const AddrInfoList list = resolve(address, port, /*passive=*/false, why);
  for (const addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s) {
      why = "socket(): " + errno_text(errno);
      continue;
    }
    int error = 0;
    if (::connect(s.fd(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        why = errno_text(errno);
        continue;
      }
      pollfd p{s.fd(), POLLOUT, 0};
      int ready = 0;
      do {
        ready = ::poll(&p, 1, poll_timeout_ms(attempt_deadline));
      } while ((ready < 0 && errno == EINTR) || (ready == 0 && Clock::now() < attempt_deadline));
      if (ready <= 0) {
        why = ready == 0 ? "the connection attempt timed out" : "poll(): " + errno_text(errno);
        continue;
      }
      socklen_t length = sizeof(error);
      if (::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
    }
    if (error != 0) {
      why = errno_text(error);
      continue;
    }
    if (connected_to_itself(s.fd())) {
      why = errno_text(ECONNREFUSED);  // nobody is listening: that is what the peer would have said
      continue;
    }
    return s;
  }
  return Socket();
}

std::string IoStatus::describe() const {
  switch (kind) {
    case ok:
      return "ok";
    case timeout:
      return "timed out";
    case closed:
      return "the connection was closed";
    case failed:
      return errno_text(error);
  }
  return "unknown";
}

IoStatus send_all(int fd, const uint8_t* data, std::size_t size, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::send(fd, data + done, size - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return errno == EPIPE || errno == ECONNRESET ? IoStatus{IoStatus::closed, errno}
                                                   : IoStatus{IoStatus::failed, errno};
    if (Clock::now() >= deadline) return {IoStatus::timeout, 0};
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, poll_timeout_ms(deadline)) < 0 && errno != EINTR) return {IoStatus::failed, errno};
  }
  return {};
}

IoStatus recv_exact(int fd, uint8_t* data, std::size_t size, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::recv(fd, data + done, size - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return {IoStatus::closed, 0};
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return {IoStatus::closed, errno};
    if (errno != EAGAIN && errno != EWOULDBLOCK) return {IoStatus::failed, errno};
    if (Clock::now() >= deadline) return {IoStatus::timeout, 0};
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, poll_timeout_ms(deadline)) < 0 && errno != EINTR) return {IoStatus::failed, errno};
  }
  return {};
}

}  // namespace plexus::rendezvous::detail
