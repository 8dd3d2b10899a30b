// plexus_rendezvous: hands a small blob (e.g. NCCL's 128-byte unique id) from rank 0 to every
// other rank of a job over TCP, so a communicator can form without MPI.
//
// Rank 0 listens on the rendezvous address and port (MASTER_ADDR:MASTER_PORT in launcher terms);
// every other rank connects, retrying until the deadline, and says who it is: its rank, the world
// size it was launched with and the job's tag. Rank 0 answers only once all world_size - 1 peers
// have joined, so either every rank gets the blob or every rank that reached rank 0 gets rank 0's
// reason for giving up (the ranks that are missing, a world-size or tag mismatch, a rank that
// joined twice). Pure POSIX sockets, no threads; every error names the address, port, rank and
// what failed.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::rendezvous {

// What went wrong, for callers that map failures to their own status codes.
enum class Failure {
  timeout,   // the deadline passed: rank 0 missing peers, or a peer unable to reach rank 0
  mismatch,  // the ranks disagree: world size, job tag, a rank out of range or joining twice
  network,   // a socket call failed for another reason (port in use, unknown host, ...)
};

class Error : public std::runtime_error {
 public:
  Error(Failure failure, const std::string& message) : std::runtime_error(message), failure_(failure) {}
  Failure failure() const noexcept { return failure_; }

 private:
  Failure failure_;
};

struct Options {
  std::string address;  // rank 0's host name or numeric address; rank 0 binds it (or any, if not local)
  uint16_t port = 0;    // 1..65535
  int32_t rank = 0;     // 0 <= rank < world_size
  int32_t world_size = 1;
  std::string job_tag;  // the same on every rank of a job (at most 1024 bytes); "" is a valid tag
  std::chrono::milliseconds timeout{60000};  // the whole exchange, from the call on
};

// The largest blob and tag the protocol carries.
inline constexpr std::size_t kMaxBlobBytes = 1 << 20;
inline constexpr std::size_t kMaxTagBytes = 1024;

// Every rank calls this once with the same address, port, world size and tag. Rank 0 passes the
// blob and gets it back; the others pass anything (ignored) and get rank 0's. A world of one rank
// returns at once without touching the network. Throws Error.
std::vector<uint8_t> share_from_rank0(const Options& options, const std::vector<uint8_t>& blob);

// Parses a port number ("29500") for a message that names `variable` ("MASTER_PORT"); throws
// Error(mismatch) unless the text is an integer in 1..65535.
uint16_t parse_port(std::string_view text, std::string_view variable);

// "{3}", "{2,3}", "{0,4-9,12}": a set of ranks for messages (sorted, duplicates removed).
std::string format_ranks(std::vector<int32_t> ranks);

}  // namespace plexus::rendezvous
