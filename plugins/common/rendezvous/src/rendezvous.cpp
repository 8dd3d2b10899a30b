// The exchange itself: rank 0's accept loop (one poll() loop over the listening socket and every
// peer connection, so a silent connection never holds up the others) and a peer's connect, retry,
// say-who-I-am, wait-for-the-answer sequence.
#include "plexus_rendezvous/rendezvous.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <thread>

#include "socket.hpp"
#include "wire.hpp"

namespace plexus::rendezvous {
namespace {

using detail::Clock;
using detail::IoStatus;
using detail::ReplyStatus;
using detail::Socket;

// How long a peer keeps waiting for rank 0's answer past its own deadline: ranks started together
// should hear rank 0's reason (which names the missing ranks) rather than time out on their own.
constexpr std::chrono::milliseconds kAnswerGrace{2000};
// How long rank 0 spends telling connected peers why it gives up, and sending the blob at least.
constexpr std::chrono::milliseconds kReplyBudget{2000};
// A single connection attempt; refused ones return at once, so this bounds only silent networks.
constexpr std::chrono::milliseconds kAttemptLimit{5000};

std::string ms_text(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

std::string tag_text(const std::string& tag) {
  return tag.empty() ? "no tag" : "tag '" + tag + "'";
}

void check_options(const Options& o) {
  if (o.world_size < 1)
    throw Error(Failure::mismatch,
                "rendezvous: world size " + std::to_string(o.world_size) + " is not positive");
  if (o.rank < 0 || o.rank >= o.world_size)
    throw Error(Failure::mismatch, "rendezvous: rank " + std::to_string(o.rank) +
                                       " is not a rank of world size " + std::to_string(o.world_size));
  if (o.job_tag.size() > kMaxTagBytes)
    throw Error(Failure::mismatch, "rendezvous: the job tag has " + std::to_string(o.job_tag.size()) +
                                       " bytes (at most " + std::to_string(kMaxTagBytes) + ")");
  if (o.world_size > 1 && o.address.empty())
    throw Error(Failure::mismatch, "rendezvous: rank " + std::to_string(o.rank) + " of " +
                                       std::to_string(o.world_size) + " has no address for rank 0");
  if (o.world_size > 1 && o.port == 0)
    throw Error(Failure::mismatch, "rendezvous: rank " + std::to_string(o.rank) + " of " +
                                       std::to_string(o.world_size) + " has no port for rank 0 (port 0)");
}

// ---- rank 0 ----

// A connection that has not said who it is yet.
struct Pending {
  Socket socket;
  std::string from;
  std::vector<uint8_t> bytes;
};

// A peer that joined: its hello was valid and its rank new.
struct Joined {
  Socket socket;
  std::string from;
};

class Rank0 {
 public:
  Rank0(const Options& o, Clock::time_point deadline)
      : o_(o), deadline_(deadline), where_(detail::endpoint(o.address, o.port)) {}

  std::vector<uint8_t> run(const std::vector<uint8_t>& blob) {
    if (blob.size() > kMaxBlobBytes)
      throw Error(Failure::mismatch, "rendezvous: a blob of " + std::to_string(blob.size()) +
                                         " bytes (at most " + std::to_string(kMaxBlobBytes) + ")");
    listener_ = detail::listen_on(o_.address, o_.port);
    while (joined_.size() + 1 < static_cast<std::size_t>(o_.world_size)) {
      if (Clock::now() >= deadline_) give_up(Failure::timeout, ReplyStatus::timed_out, timeout_message());
      poll_once();
    }
    // Everybody is here: hand out the blob. A peer that fails now was there a moment ago.
    const std::vector<uint8_t> reply = detail::encode_reply(ReplyStatus::ok, blob.data(), blob.size());
    const Clock::time_point send_deadline = std::max(deadline_, Clock::now() + kReplyBudget);
    for (auto& [rank, peer] : joined_) {
      const IoStatus s = detail::send_all(peer.socket.fd(), reply.data(), reply.size(), send_deadline);
      if (s.kind != IoStatus::ok)
        throw Error(s.kind == IoStatus::timeout ? Failure::timeout : Failure::network,
                    "rank 0 at " + where_ + " could not send the rendezvous blob to rank " +
                        std::to_string(rank) + " (" + peer.from + "): " + s.describe());
    }
    return blob;
  }

 private:
  void poll_once() {
    std::vector<pollfd> fds;
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (const Pending& p : pending_) fds.push_back({p.socket.fd(), POLLIN, 0});
    std::vector<int32_t> joined_ranks;
    for (const auto& [rank, peer] : joined_) {
      fds.push_back({peer.socket.fd(), POLLIN, 0});  // readable only when the peer went away
      joined_ranks.push_back(rank);
    }
    const int ready = ::poll(fds.data(), fds.size(), detail::poll_timeout_ms(deadline_));
    if (ready < 0) {
      if (errno == EINTR) return;
      throw Error(Failure::network, "rank 0 at " + where_ + ": poll() failed: " + std::strerror(errno));
    }
    if (ready == 0) return;
    // Joined peers first (their indices follow the pending ones), then pending ones from the back,
    // so erasing never shifts an index still to be visited; new connections last.
    for (std::size_t i = joined_ranks.size(); i-- > 0;)
      if (fds[1 + pending_.size() + i].revents != 0) peer_left(joined_ranks[i]);
    for (std::size_t i = pending_.size(); i-- > 0;)
      if (fds[1 + i].revents != 0) read_hello(i);
    if (fds[0].revents != 0) accept_all();
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage from{};
      socklen_t length = sizeof(from);
      Socket s(::accept4(listener_.fd(), reinterpret_cast<sockaddr*>(&from), &length,
                         SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!s) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN: none left; anything else (e.g. out of descriptors) shows up as a timeout
      }
      pending_.push_back({std::move(s), detail::endpoint(reinterpret_cast<sockaddr*>(&from), length), {}});
    }
  }

  void read_hello(std::size_t index) {
    Pending& p = pending_[index];
    uint8_t buffer[4096];
    const ssize_t n = ::recv(p.socket.fd(), buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {  // gone before saying who it is (a peer that will retry, or a port probe)
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(index));
      return;
    }
    p.bytes.insert(p.bytes.end(), buffer, buffer + n);
    detail::Hello hello;
    std::string why;
    const detail::Parse parse = detail::parse_hello(p.bytes, hello, why);
    if (parse == detail::Parse::incomplete) return;
    Pending peer = std::move(p);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(index));
    if (parse == detail::Parse::invalid) {
      notes_.push_back("ignored a connection from " + peer.from + ": " + why);
      const std::string text = "rank 0 at " + where_ + " does not understand this connection: " + why;
      reply(peer.socket, ReplyStatus::refused, text, Clock::now() + kReplyBudget);
      return;
    }
    admit(std::move(peer), hello);
  }

  // Checks a complete hello against this job; any disagreement ends the rendezvous for all.
  void admit(Pending peer, const detail::Hello& hello) {
    const std::string who = "rank " + std::to_string(hello.rank) + " (from " + peer.from + ")";
    std::string problem;
    if (hello.world_size != o_.world_size)
      problem = who + " was launched with world size " + std::to_string(hello.world_size) + ", rank 0 with " +
                std::to_string(o_.world_size) + ": the ranks of one job disagree on the world size";
    else if (hello.tag != o_.job_tag)
      problem = who + " belongs to the job with " + tag_text(hello.tag) + ", rank 0 to the job with " +
                tag_text(o_.job_tag) + ": two jobs share the rendezvous address " + where_;
    else if (hello.rank == 0)
      problem = "a second rank 0 joined (from " + peer.from + "): two processes were given rank 0";
    else if (hello.rank < 0 || hello.rank >= o_.world_size)
      problem = who + " is not a rank of world size " + std::to_string(o_.world_size);
    else if (const auto it = joined_.find(hello.rank); it != joined_.end())
      problem = "rank " + std::to_string(hello.rank) + " joined twice (from " + it->second.from +
                " and from " + peer.from + "): two processes were given the same rank";
    if (problem.empty()) {
      joined_.emplace(hello.rank, Joined{std::move(peer.socket), peer.from});
      return;
    }
    extra_.push_back(std::move(peer.socket));
    give_up(Failure::mismatch, ReplyStatus::refused,
            "rank 0 of " + std::to_string(o_.world_size) + " at " + where_ +
                " refused the rendezvous: " + problem);
  }

  void peer_left(int32_t rank) {
    const auto it = joined_.find(rank);
    notes_.push_back("rank " + std::to_string(rank) + " (from " + it->second.from +
                     ") joined but closed its connection before all ranks were there");
    joined_.erase(it);
  }

  std::string timeout_message() const {
    std::vector<int32_t> missing, present;
    for (int32_t r = 1; r < o_.world_size; ++r) (joined_.count(r) != 0 ? present : missing).push_back(r);
    std::string text = "rank 0 of " + std::to_string(o_.world_size) + " at " + where_ + " timed out after " +
                       ms_text(o_.timeout) + " waiting for ranks " + format_ranks(missing) + " to join (" +
                       (present.empty() ? std::string("none joined") : "joined: " + format_ranks(present)) +
                       "; " + tag_text(o_.job_tag) + ")";
    for (const std::string& note : notes_) text += "; " + note;
    return text;
  }

  // Tells every connected peer why, best effort, then throws.
  [[noreturn]] void give_up(Failure failure, ReplyStatus status, const std::string& message) {
    const Clock::time_point budget = Clock::now() + kReplyBudget;
    for (auto& [rank, peer] : joined_) reply(peer.socket, status, message, budget);
    for (Socket& s : extra_) reply(s, status, message, budget);
    throw Error(failure, message);
  }

  static void reply(const Socket& s, ReplyStatus status, const std::string& text,
                    Clock::time_point deadline) {
    const std::size_t size = std::min(text.size(), detail::kMaxMessageBytes);
    const std::vector<uint8_t> bytes =
        detail::encode_reply(status, reinterpret_cast<const uint8_t*>(text.data()), size);
    static_cast<void>(detail::send_all(s.fd(), bytes.data(), bytes.size(), deadline));
  }

  const Options& o_;
  Clock::time_point deadline_;
  std::string where_;
  Socket listener_;
  std::vector<Pending> pending_;
  std::map<int32_t, Joined> joined_;
  std::vector<Socket> extra_;  // refused peers, told why before the throw
  std::vector<std::string> notes_;
};

// ---- every other rank ----

class Peer {
 public:
  Peer(const Options& o, Clock::time_point deadline)
      : o_(o),
        deadline_(deadline),
        where_(detail::endpoint(o.address, o.port)),
        who_("rank " + std::to_string(o.rank) + " of " + std::to_string(o.world_size)) {}

  std::vector<uint8_t> run() {
    const Socket s = connect();
    const std::vector<uint8_t> hello = detail::encode_hello({o_.rank, o_.world_size, o_.job_tag});
    const IoStatus sent = detail::send_all(s.fd(), hello.data(), hello.size(), deadline_);
    if (sent.kind != IoStatus::ok)
      throw Error(sent.kind == IoStatus::timeout ? Failure::timeout : Failure::network,
                  who_ + " could not send its hello to rank 0 at " + where_ + ": " + sent.describe());

    const Clock::time_point answer_deadline = deadline_ + kAnswerGrace;
    uint8_t header_bytes[detail::kReplyHeaderBytes];
    expect(detail::recv_exact(s.fd(), header_bytes, sizeof(header_bytes), answer_deadline));
    detail::ReplyHeader header;
    std::string why;
    if (!detail::parse_reply_header(header_bytes, header, why))
      throw Error(Failure::network, who_ + " got an answer from " + where_ + " that is " + why +
                                        " (is something else listening on that port?)");
    std::vector<uint8_t> body(header.length);
    expect(detail::recv_exact(s.fd(), body.data(), body.size(), answer_deadline));
    if (header.status == ReplyStatus::ok) return body;
    const std::string text(body.begin(), body.end());
    throw Error(header.status == ReplyStatus::timed_out ? Failure::timeout : Failure::mismatch,
                who_ + ": " + text);
  }

 private:
  Socket connect() {
    auto backoff = std::chrono::milliseconds(10);
    std::string why = "no attempt was made";
    for (;;) {
      const Clock::time_point now = Clock::now();
      if (now >= deadline_)
        throw Error(Failure::timeout, who_ + " could not connect to rank 0 at " + where_ + " within " +
                                          ms_text(o_.timeout) + ": " + why + " (is rank 0 running, and is '" +
                                          o_.address + "' its address?)");
      Socket s = detail::try_connect(o_.address, o_.port, std::min(deadline_, now + kAttemptLimit), why);
      if (s) return s;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
      std::this_thread::sleep_for(std::max(std::chrono::milliseconds(0), std::min(backoff, left)));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
  }

  void expect(const IoStatus& s) const {
    if (s.kind == IoStatus::ok) return;
    if (s.kind == IoStatus::timeout)
      throw Error(Failure::timeout,
                  who_ + " joined rank 0 at " + where_ + " but got no answer within " +
                      ms_text(o_.timeout + kAnswerGrace) +
                      ": rank 0 is still waiting for other ranks (its own error names them)");
    throw Error(Failure::network, who_ + " lost its connection to rank 0 at " + where_ +
                                      " before the answer: " + s.describe() + " (did rank 0 fail?)");
  }

  const Options& o_;
  Clock::time_point deadline_;
  std::string where_;
  std::string who_;
};

}  // namespace

std::vector<uint8_t> share_from_rank0(const Options& options, const std::vector<uint8_t>& blob) {
  check_options(options);
  if (options.world_size == 1) return blob;
  const Clock::time_point deadline = Clock::now() + options.timeout;
  if (options.rank == 0) return Rank0(options, deadline).run(blob);
  return Peer(options, deadline).run();
}

uint16_t parse_port(std::string_view text, std::string_view variable) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 1 || value > 65535)
    throw Error(Failure::mismatch, std::string(variable) + "='" + std::string(text) +
                                       "' is not a port number (an integer from 1 to 65535)");
  return static_cast<uint16_t>(value);
}

std::string format_ranks(std::vector<int32_t> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string text = "{";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) text += ",";
    text += std::to_string(ranks[i]);
    if (j >= i + 2) {  // three or more in a row: a range
      text += '-' + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      ++i;
    }
  }
  return text + "}";
}

}  // namespace plexus::rendezvous
