// A communicator of a loaded comm backend (sdk/include/plexus/comm.h) as the engine uses it:
// RAII over the backend's handle, blocking calls and started requests, every failure a
// ComponentCallError whose message names the group ("dp", "world", ...) and the backend's own
// account (for a timeout: the ranks that did not take part).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "plexus/comm.h"
#include "plexus/core/plugin_host.hpp"

namespace plexus::distributed {

enum class ReduceOp : int32_t {
  sum = PLX_REDUCE_SUM,
  avg = PLX_REDUCE_AVG,
  max = PLX_REDUCE_MAX,
  min = PLX_REDUCE_MIN
};

class Communicator;

// An operation in flight. wait() completes it (throwing on failure); a request dropped
// without wait() is still completed, quietly, so the backend never holds freed buffers.
class Request {
 public:
  Request() = default;
  Request(const Communicator* comm, void* handle) : comm_(comm), handle_(handle) {}
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();
  void wait();
  bool pending() const noexcept { return handle_ != nullptr; }

 private:
  const Communicator* comm_ = nullptr;
  void* handle_ = nullptr;
};

// The bytes of a tensor's elements.
uint64_t tensor_bytes(const DLTensor& t) noexcept;

// The kinds of call a communicator counts (Communicator::traffic).
enum class Collective : uint8_t { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send, recv };
inline constexpr std::size_t kCollectiveKinds = 7;
const char* collective_name(Collective kind) noexcept;

// What a communicator's calls carried since it was made, per kind: the calls and their payload
// bytes on this rank, the n of each collective's cost (docs/distributed.md): an all-reduce's or a
// broadcast's buffer, an all-gather's gathered tensor, a reduce-scatter's scattered one, the
// elements an all-to-all sends, a send's or receive's buffer. A ring moves 2 (size - 1) / size of
// an all-reduce's n per rank, and (size - 1) / size of an all-gather's or reduce-scatter's.
struct Traffic {
  std::array<uint64_t, kCollectiveKinds> calls{}, bytes{};
};

class Communicator {
 public:
  // Takes ownership of `handle`, a communicator `component` created.
  Communicator(const Component& component, void* handle, std::string name);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const std::string& name() const noexcept { return name_; }
  int32_t rank() const noexcept { return rank_; }
  int32_t size() const noexcept { return size_; }
  const Component& component() const noexcept { return *component_; }
  const plx_comm_v1& table() const noexcept { return *table_; }
  void* handle() const noexcept { return handle_; }

  void all_reduce(const DLTensor& buffer, ReduceOp op) const;  // in place
  // One host value reduced over the group (a loss, a norm's squares, a count).
  double all_reduce(double value, ReduceOp op) const;
  Request start_all_reduce(const DLTensor& buffer, ReduceOp op, plx_stream stream = nullptr) const;
  void all_gather(const DLTensor& send, const DLTensor& recv) const;
  void broadcast(const DLTensor& buffer, int32_t root) const;
  // Point-to-point with rank `peer` of this communicator, matched by `tag`: started, completed by
  // the request's wait (the buffer must stay alive and untouched until then).
  Request start_send(const DLTensor& buffer, int32_t peer, int32_t tag) const;
  Request start_recv(const DLTensor& buffer, int32_t peer, int32_t tag) const;
  void barrier() const;
  // Collective over this communicator: ranks with equal color form a new one, ordered by key;
  // color < 0 gives nullptr.
  std::unique_ptr<Communicator> split(int32_t color, int32_t key, std::string name) const;
  // Ends every rank of the job after a fault (the backend's abort); falls back to exiting this
  // process when the backend has none. Never returns.
  [[noreturn]] void abort(const std::string& reason) const noexcept;

  void check(const char* operation, plx_status status) const;

  // Counts a call of `kind` carrying `bytes` (the engine's calls count themselves; the host counts
  // the plugins' calls through plx_host_api's group functions). Any thread.
  void count(Collective kind, uint64_t bytes) const noexcept;
  Traffic traffic() const noexcept;

 private:
  mutable std::array<std::atomic<uint64_t>, kCollectiveKinds> calls_{}, bytes_{};
  const Component* component_;
  const plx_comm_v1* table_;
  void* handle_;
  std::string name_;
  int32_t rank_ = 0, size_ = 1;
};

}  // namespace plexus::distributed
