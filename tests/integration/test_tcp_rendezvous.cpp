// plexus_rendezvous (plugins/common/rendezvous) between real processes on 127.0.0.1: the test
// forks one child per rank, each child runs share_from_rank0 as a launched rank would and writes
// its outcome (the blob, or the error's kind and message, and how long it took) back through a
// pipe. Checked: with 2 and 4 ranks every rank gets rank 0's 128 random bytes, also when rank 0
// starts last (the peers retry until it listens) and when something that is not a peer connects
// first; a missing rank makes rank 0 time out naming exactly the missing ranks, the peers that
// joined hear that reason, and a rank that joined and left again counts as missing; a world-size
// or job-tag mismatch and a rank given twice are refused by rank 0 and by the peer, naming both
// sides; nobody listening is a timeout naming the address after the deadline; a port in use and
// invalid options are refused at once.
//
// Timing bars: deadlines here are 0.5 to 3.5 s. An error must come no earlier than its deadline
// (the peer really retried) and at most 3 s after it: rank 0 gives up at its deadline and peers
// wait 2 s past theirs for rank 0's reason (kAnswerGrace), plus scheduling slack on a loaded
// two-core machine.
#define BOOST_TEST_MODULE tcp_rendezvous
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "plexus_rendezvous/rendezvous.hpp"

namespace rdv = plexus::rendezvous;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

// One launched rank: its inputs as a launcher would give them, and when it starts.
struct RankSpec {
  int32_t rank = 0;
  int32_t world_size = 1;
  std::string tag = "job-a";
  milliseconds timeout{5000};
  milliseconds start_delay{0};
};

// What a child reports.
struct Outcome {
  bool ok = false;
  rdv::Failure failure = rdv::Failure::network;
  std::vector<uint8_t> blob;
  std::string message;
  double seconds = 0;
};

// A port nobody listens on right now: bind port 0 on 127.0.0.1, read the port, close.
uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  BOOST_REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  socklen_t length = sizeof(a);
  BOOST_REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::vector<uint8_t> random_blob(std::size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> blob(size);
  for (uint8_t& b : blob) b = static_cast<uint8_t>(rng());
  return blob;
}

rdv::Options options_for(const RankSpec& spec, uint16_t port) {
  rdv::Options o;
  o.address = "127.0.0.1";
  o.port = port;
  o.rank = spec.rank;
  o.world_size = spec.world_size;
  o.job_tag = spec.tag;
  o.timeout = spec.timeout;
  return o;
}

// Runs the rendezvous in this process and times it.
Outcome run_rank(const RankSpec& spec, uint16_t port, const std::vector<uint8_t>& blob) {
  Outcome out;
  const auto start = Clock::now();
  try {
    out.blob = rdv::share_from_rank0(options_for(spec, port), spec.rank == 0 ? blob : std::vector<uint8_t>{});
    out.ok = true;
  } catch (const rdv::Error& e) {
    out.failure = e.failure();
    out.message = e.what();
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

void put(std::string& s, const void* p, std::size_t n) {
  s.append(static_cast<const char*>(p), n);
}
template <class T>
T take(const std::string& s, std::size_t& at) {
  T v{};
  std::memcpy(&v, s.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

std::string encode(const Outcome& o) {
  std::string s;
  const uint8_t ok = o.ok ? 1 : 0;
  const int32_t failure = static_cast<int32_t>(o.failure);
  const uint32_t blob_size = static_cast<uint32_t>(o.blob.size());
  const uint32_t message_size = static_cast<uint32_t>(o.message.size());
  put(s, &ok, 1);
  put(s, &failure, 4);
  put(s, &o.seconds, sizeof(double));
  put(s, &blob_size, 4);
  put(s, o.blob.data(), o.blob.size());
  put(s, &message_size, 4);
  put(s, o.message.data(), o.message.size());
  return s;
}

Outcome decode(const std::string& s) {
  Outcome o;
  if (s.size() < 21) {
    o.message = "the child died without reporting (" + std::to_string(s.size()) + " bytes)";
    return o;
  }
  std::size_t at = 0;
  o.ok = take<uint8_t>(s, at) != 0;
  o.failure = static_cast<rdv::Failure>(take<int32_t>(s, at));
  o.seconds = take<double>(s, at);
  const uint32_t blob_size = take<uint32_t>(s, at);
  o.blob.assign(s.begin() + static_cast<std::ptrdiff_t>(at),
                s.begin() + static_cast<std::ptrdiff_t>(at + blob_size));
  at += blob_size;
  const uint32_t message_size = take<uint32_t>(s, at);
  o.message = s.substr(at, message_size);
  return o;
}

// Forks one child per spec (each a separate process, as launched ranks are), waits for all of
// them and returns their outcomes in spec order.
std::vector<Outcome> run_processes(const std::vector<RankSpec>& specs, uint16_t port,
                                   const std::vector<uint8_t>& blob) {
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (const RankSpec& spec : specs) {
    int fds[2];
    BOOST_REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(fds[0]);
      ::alarm(60);  // a child that hangs despite its deadlines dies instead of hanging the test
      std::this_thread::sleep_for(spec.start_delay);
      const std::string bytes = encode(run_rank(spec, port, blob));
      std::size_t done = 0;
      while (done < bytes.size()) {
        const ssize_t n = ::write(fds[1], bytes.data() + done, bytes.size() - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
      ::_exit(0);  // no atexit handlers, no Boost.Test teardown in the child
    }
    ::close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::vector<Outcome> outcomes;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::string bytes;
    char buffer[4096];
    ssize_t n = 0;
    while ((n = ::read(pipes[i], buffer, sizeof(buffer))) > 0)
      bytes.append(buffer, static_cast<std::size_t>(n));
    ::close(pipes[i]);
    int status = 0;
    ::waitpid(pids[i], &status, 0);
    BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 0),
               "rank " << specs[i].rank << " exited abnormally");
    outcomes.push_back(decode(bytes));
    if (!outcomes.back().ok) BOOST_TEST_MESSAGE("rank " << specs[i].rank << ": " << outcomes.back().message);
  }
  return outcomes;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The deadline was honoured: not before it, and not long after (see the header comment).
void check_gave_up_on_time(const Outcome& o, milliseconds deadline) {
  const double d = std::chrono::duration<double>(deadline).count();
  BOOST_TEST(o.seconds >= d - 0.05);
  BOOST_TEST(o.seconds <= d + 3.0);
}

}  // namespace

BOOST_DATA_TEST_CASE(every_rank_gets_rank_0s_blob, boost::unit_test::data::make({2, 4}), world) {
  const uint16_t port = free_port();
  const std::vector<uint8_t> blob = random_blob(128, 1234 + static_cast<uint64_t>(world));
  std::vector<RankSpec> specs;
  for (int32_t r = 0; r < world; ++r) {
    RankSpec s;
    s.rank = r;
    s.world_size = world;
    s.start_delay = milliseconds(r == 0 ? 300 : 0);  // rank 0 last: the peers must retry
    specs.push_back(s);
  }
  const std::vector<Outcome> outcomes = run_processes(specs, port, blob);
  for (int32_t r = 0; r < world; ++r) {
    BOOST_TEST_CONTEXT("rank " << r << " of " << world) {
      BOOST_TEST(outcomes[r].ok, outcomes[r].message);
      BOOST_TEST(outcomes[r].blob == blob);
    }
  }
}

BOOST_AUTO_TEST_CASE(rank_0_times_out_naming_the_missing_rank) {
  const uint16_t port = free_port();
  const milliseconds deadline(1500);
  std::vector<RankSpec> specs;
  for (int32_t r = 0; r < 3; ++r) specs.push_back({r, 4, "job-a", deadline, milliseconds(0)});  // no rank 3
  const std::vector<Outcome> o = run_processes(specs, port, random_blob(128, 1));
  BOOST_TEST(!o[0].ok);
  BOOST_TEST((o[0].failure == rdv::Failure::timeout));
  BOOST_TEST(contains(o[0].message, "waiting for ranks {3}"), o[0].message);
  BOOST_TEST(contains(o[0].message, "joined: {1,2}"), o[0].message);
  BOOST_TEST(contains(o[0].message, "127.0.0.1:" + std::to_string(port)), o[0].message);
  check_gave_up_on_time(o[0], deadline);
  for (int r = 1; r < 3; ++r) {  // the peers that joined hear rank 0's reason
    BOOST_TEST(!o[r].ok);
    BOOST_TEST((o[r].failure == rdv::Failure::timeout));
    BOOST_TEST(contains(o[r].message, "rank " + std::to_string(r) + " of 4"), o[r].message);
    BOOST_TEST(contains(o[r].message, "waiting for ranks {3}"), o[r].message);
    BOOST_TEST(o[r].seconds <= 1.5 + 3.0);
  }
}

BOOST_AUTO_TEST_CASE(rank_0_names_every_missing_rank) {
  const uint16_t port = free_port();
  const milliseconds deadline(1000);
  const std::vector<Outcome> o =
      run_processes({{0, 4, "job-a", deadline, milliseconds(0)}, {1, 4, "job-a", deadline, milliseconds(0)}},
                    port, random_blob(128, 2));
  BOOST_TEST((o[0].failure == rdv::Failure::timeout));
  BOOST_TEST(contains(o[0].message, "waiting for ranks {2,3}"), o[0].message);
  check_gave_up_on_time(o[0], deadline);
  BOOST_TEST(contains(o[1].message, "waiting for ranks {2,3}"), o[1].message);
}

BOOST_AUTO_TEST_CASE(a_rank_that_joins_and_leaves_counts_as_missing) {
  // Rank 1 gives up first (its 0.5 s deadline plus the 2 s it waits for an answer) and closes its
  // connection; rank 0, still waiting for rank 2, must not count it as present any more.
  const uint16_t port = free_port();
  const std::vector<Outcome> o = run_processes({{0, 3, "job-a", milliseconds(3500), milliseconds(0)},
                                                {1, 3, "job-a", milliseconds(500), milliseconds(100)}},
                                               port, random_blob(128, 9));
  BOOST_TEST((o[0].failure == rdv::Failure::timeout));
  BOOST_TEST(contains(o[0].message, "waiting for ranks {1,2}"), o[0].message);
  BOOST_TEST(contains(o[0].message, "rank 1 (from 127.0.0.1:"), o[0].message);
  BOOST_TEST(contains(o[0].message, "closed its connection"), o[0].message);
  BOOST_TEST((o[1].failure == rdv::Failure::timeout));
  BOOST_TEST(contains(o[1].message, "got no answer"), o[1].message);
}

BOOST_AUTO_TEST_CASE(a_world_size_mismatch_is_refused) {
  const uint16_t port = free_port();
  const std::vector<Outcome> o = run_processes({{0, 2, "job-a", milliseconds(5000), milliseconds(0)},
                                                {1, 3, "job-a", milliseconds(5000), milliseconds(0)}},
                                               port, random_blob(128, 3));
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST_CONTEXT("rank " << r) {
      BOOST_TEST(!o[r].ok);
      BOOST_TEST((o[r].failure == rdv::Failure::mismatch));
      BOOST_TEST(contains(o[r].message, "world size 3, rank 0 with 2"), o[r].message);
      BOOST_TEST(o[r].seconds < 4.0);  // refused at once, not at the deadline
    }
  }
}

BOOST_AUTO_TEST_CASE(a_job_tag_mismatch_is_refused) {
  const uint16_t port = free_port();
  const std::vector<Outcome> o = run_processes({{0, 2, "job-a", milliseconds(5000), milliseconds(0)},
                                                {1, 2, "job-b", milliseconds(5000), milliseconds(0)}},
                                               port, random_blob(128, 4));
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST((o[r].failure == rdv::Failure::mismatch));
    BOOST_TEST(contains(o[r].message, "tag 'job-b'"), o[r].message);
    BOOST_TEST(contains(o[r].message, "tag 'job-a'"), o[r].message);
  }
}

BOOST_AUTO_TEST_CASE(a_rank_given_twice_is_refused) {
  const uint16_t port = free_port();
  const milliseconds t(5000);
  const std::vector<Outcome> o = run_processes({{0, 3, "job-a", t, milliseconds(0)},
                                                {1, 3, "job-a", t, milliseconds(0)},
                                                {1, 3, "job-a", t, milliseconds(200)}},
                                               port, random_blob(128, 5));
  BOOST_TEST((o[0].failure == rdv::Failure::mismatch));
  BOOST_TEST(contains(o[0].message, "rank 1 joined twice"), o[0].message);
  BOOST_TEST(o[0].seconds < 4.0);
  for (int i = 1; i < 3; ++i) {
    BOOST_TEST(!o[i].ok);
    BOOST_TEST(contains(o[i].message, "rank 1 joined twice"), o[i].message);
  }
}

BOOST_AUTO_TEST_CASE(a_stray_connection_does_not_disturb_the_rendezvous) {
  const uint16_t port = free_port();
  const std::vector<uint8_t> blob = random_blob(128, 6);
  // Something that is not a peer (a process of its own) connects first and speaks another protocol.
  const pid_t stray = ::fork();
  BOOST_REQUIRE(stray >= 0);
  if (stray == 0) {
    std::this_thread::sleep_for(milliseconds(100));
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      const char request[] = "GET / HTTP/1.0\r\n\r\n";
      static_cast<void>(::send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL));
      std::this_thread::sleep_for(milliseconds(300));
    }
    ::_exit(0);
  }
  const std::vector<Outcome> o = run_processes({{0, 2, "job-a", milliseconds(5000), milliseconds(0)},
                                                {1, 2, "job-a", milliseconds(5000), milliseconds(500)}},
                                               port, blob);
  ::waitpid(stray, nullptr, 0);
  BOOST_TEST(o[0].ok, o[0].message);
  BOOST_TEST(o[1].ok, o[1].message);
  BOOST_TEST(o[1].blob == blob);
}

BOOST_AUTO_TEST_CASE(nobody_listening_is_a_timeout_naming_the_address) {
  const uint16_t port = free_port();
  const milliseconds deadline(800);
  const std::vector<Outcome> o = run_processes({{1, 2, "job-a", deadline, milliseconds(0)}}, port, {});
  BOOST_TEST(!o[0].ok);
  BOOST_TEST((o[0].failure == rdv::Failure::timeout));
  BOOST_TEST(
      contains(o[0].message, "rank 1 of 2 could not connect to rank 0 at 127.0.0.1:" + std::to_string(port)),
      o[0].message);
  BOOST_TEST(contains(o[0].message, "Connection refused"), o[0].message);
  check_gave_up_on_time(o[0], deadline);
}

BOOST_AUTO_TEST_CASE(a_port_in_use_is_refused_at_once) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  BOOST_REQUIRE(::listen(fd, 1) == 0);
  socklen_t length = sizeof(a);
  BOOST_REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) == 0);
  const uint16_t port = ntohs(a.sin_port);
  const Outcome o = run_rank({0, 2, "job-a", milliseconds(5000), milliseconds(0)}, port, random_blob(8, 7));
  ::close(fd);
  BOOST_TEST_MESSAGE(o.message);
  BOOST_TEST(!o.ok);
  BOOST_TEST((o.failure == rdv::Failure::network));
  BOOST_TEST(contains(o.message, "cannot listen on 127.0.0.1:" + std::to_string(port)), o.message);
  BOOST_TEST(contains(o.message, "in use"), o.message);
  BOOST_TEST(o.seconds < 1.0);
}

BOOST_AUTO_TEST_CASE(options_are_checked_before_any_network_use) {
  const std::vector<uint8_t> blob = random_blob(128, 8);
  // A world of one needs no peer, address or port.
  rdv::Options single;
  BOOST_TEST(rdv::share_from_rank0(single, blob) == blob);
  auto refused = [&](rdv::Options o, const std::string& part) {
    try {
      static_cast<void>(rdv::share_from_rank0(o, blob));
      BOOST_TEST(false, "accepted: " << part);
    } catch (const rdv::Error& e) {
      BOOST_TEST((e.failure() == rdv::Failure::mismatch));
      BOOST_TEST(contains(e.what(), part), e.what());
    }
  };
  rdv::Options o;
  o.address = "127.0.0.1";
  o.port = 1;
  o.world_size = 4;
  o.rank = 4;
  refused(o, "rank 4 is not a rank of world size 4");
  o.rank = 1;
  o.port = 0;
  refused(o, "no port");
  o.port = 29500;
  o.address.clear();
  refused(o, "no address");
}

BOOST_AUTO_TEST_CASE(ports_and_rank_sets_read_and_print) {
  BOOST_TEST(rdv::parse_port("29500", "MASTER_PORT") == 29500);
  for (const char* bad : {"", "0", "65536", "29500x", "-1", " 1"}) {
    try {
      static_cast<void>(rdv::parse_port(bad, "MASTER_PORT"));
      BOOST_TEST(false, "accepted '" << bad << "'");
    } catch (const rdv::Error& e) {
      BOOST_TEST(contains(e.what(), std::string("MASTER_PORT='") + bad + "'"), e.what());
    }
  }
  BOOST_TEST(rdv::format_ranks({}) == "{}");
  BOOST_TEST(rdv::format_ranks({3}) == "{3}");
  BOOST_TEST(rdv::format_ranks({3, 2}) == "{2,3}");
  BOOST_TEST(rdv::format_ranks({12, 0, 4, 5, 6, 7, 8, 9, 5}) == "{0,4-9,12}");
}
