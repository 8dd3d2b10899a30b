#include "communicator.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <thread>
#include <utility>

#include "plexus/cpp/host.hpp"
#include "plexus_rendezvous/rendezvous.hpp"
#include "tensors.hpp"

namespace plexus::comm_nccl {
namespace {

// Every live communicator of this process, for the job-wide abort.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::set<Communicator*>& registry() {
  static std::set<Communicator*> all;
  return all;
}

// ncclConfig_t gained commName in a later NCCL than the oldest this plugin builds with (2.18);
// the name shows in NCCL's own logs (NCCL_DEBUG=INFO) when the field exists.
template <class Config>
void set_comm_name(Config& config, const char* name) {
  if constexpr (requires { config.commName = name; }) config.commName = name;
}

ncclConfig_t nonblocking_config(const char* name) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  set_comm_name(config, name);
  return config;
}

// Waits while NCCL is still working on the last call on `comm` (ncclInProgress, the state of a
// nonblocking communicator). Returns ncclSuccess, NCCL's error, or ncclInProgress once
// `deadline` passed.
ncclResult_t await_nccl(ncclComm_t comm, ncclResult_t result, const Deadline& deadline) {
  Backoff backoff;
  while (result == ncclInProgress) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    result = query != ncclSuccess ? query : state;
    if (result != ncclInProgress || deadline.passed()) break;
    backoff.pause();
  }
  return result;
}

bool caller_error(ncclResult_t result) {
  return result == ncclInvalidArgument || result == ncclInvalidUsage;
}

void warn(const std::string& message) noexcept {
  try {
    plexus::sdk::Host::current().warn(message);
  } catch (...) {  // no host (a test driving the table directly): nothing to tell
  }
}

// Device memory released on every path.
struct DeviceFree {
  void operator()(void* p) const noexcept { static_cast<void>(cudaFree(p)); }
};

}  // namespace

// ---- life cycle ----

Communicator::Communicator(ncclComm_t comm, int device, int32_t rank, int32_t size, uint32_t timeout_ms,
                           std::string name, std::vector<int32_t> members)
    : comm_(comm),
      device_(device),
      rank_(rank),
      size_(size),
      timeout_ms_(timeout_ms),
      name_(std::move(name)),
      members_(std::move(members)) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  registry().insert(this);
}

std::unique_ptr<Communicator> Communicator::create_world(const ncclUniqueId& id, int32_t rank, int32_t size,
                                                         int device, uint32_t timeout_ms,
                                                         const Deadline& deadline) {
  const CurrentDevice current(device);
  ncclConfig_t config = nonblocking_config("world");
  ncclComm_t comm = nullptr;
  const std::string who = "the NCCL world (rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          " on cuda:" + std::to_string(device) + ")";
  const ncclResult_t started = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  const ncclResult_t result = await_nccl(comm, started, deadline);
  if (result != ncclSuccess) {
    const std::string text = result == ncclInProgress ? std::string() : nccl_text(result, comm);
    if (comm != nullptr) static_cast<void>(ncclCommAbort(comm));
    std::vector<int32_t> others;
    for (int32_t r = 0; r < size; ++r)
      if (r != rank) others.push_back(r);
    if (result == ncclInProgress)
      throw Error(
          PLX_ERR_TIMEOUT,
          "ncclCommInitRank of " + who + " did not complete within " + std::to_string(deadline.limit_ms()) +
              " ms; NCCL cannot tell which rank is missing: one or more of ranks " +
              rendezvous::format_ranks(others) +
              " did not reach it (dead, stopped, or still behind) or cannot be reached over the network "
              "NCCL chose (NCCL_SOCKET_IFNAME). The communicator was aborted");
    throw Error(status_of(result), "ncclCommInitRank of " + who + " failed: " + text);
  }
  std::vector<int32_t> members(static_cast<std::size_t>(size));
  std::iota(members.begin(), members.end(), 0);
  std::unique_ptr<Communicator> world(
      new Communicator(comm, device, rank, size, timeout_ms, "world", members));
  world->prepare();
  return world;
}

void Communicator::prepare() {
  const CurrentDevice current(device_);
  PLX_NCCL_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), describe());
  PLX_NCCL_CUDA(cudaMalloc(&scratch_, sizeof(float)), describe());
  PLX_NCCL_CUDA(cudaMemset(scratch_, 0, sizeof(float)), describe());
}

Communicator::~Communicator() {
  {
    const std::lock_guard<std::mutex> lock(registry_mutex());
    registry().erase(this);
  }
  try {
    const CurrentDevice current(device_);
    if (comm_ != nullptr) {
      // Finalize flushes what is still queued; a peer that is gone can make it hang, so it is
      // bounded like everything else, and an unclean end is an abort.
      bool clean = false;
      if (!broken_) {
        const Deadline deadline = Deadline::after_ms(timeout_ms_ != 0 ? timeout_ms_ : 60000);
        const ncclResult_t result = await_nccl(comm_, ncclCommFinalize(comm_), deadline);
        clean = result == ncclSuccess;
        if (!clean)
          warn("destroying " + describe() + ": ncclCommFinalize " +
               (result == ncclInProgress ? std::string("did not finish in time") : nccl_text(result, comm_)) +
               "; aborting it instead");
      }
      static_cast<void>(clean ? ncclCommDestroy(comm_) : ncclCommAbort(comm_));
      comm_ = nullptr;
    }
    for (cudaEvent_t e : free_events_) static_cast<void>(cudaEventDestroy(e));
    if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
    if (scratch_ != nullptr) static_cast<void>(cudaFree(scratch_));
  } catch (...) {  // the device is gone: what it held goes with its context
  }
}

// ---- split ----

std::unique_ptr<Communicator> Communicator::split(int32_t color, int32_t key) {
  const std::string child_name = name_ + ".split(color=" + std::to_string(color) + ")";
  const Deadline deadline = Deadline::after_ms(timeout_ms_);
  ncclComm_t child = nullptr;
  ncclResult_t result = ncclSuccess;
  std::string text;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    expect_usable("split");
    const CurrentDevice current(device_);
    ncclConfig_t config = nonblocking_config(child_name.c_str());
    result = ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config);
    // A rank with a color waits for its new communicator; a rank without one (no child) for the
    // parent; then the parent must be done too.
    result = await_nccl(child != nullptr ? child : comm_, result, deadline);
    if (result == ncclSuccess) result = await_nccl(comm_, ncclInProgress, deadline);
    if (result != ncclSuccess && result != ncclInProgress)
      text = nccl_text(result, child != nullptr ? child : comm_);
  }
  if (result != ncclSuccess) {
    if (child != nullptr) static_cast<void>(ncclCommAbort(child));
    if (result == ncclInProgress)
      timed_out("split", deadline.limit_ms(), deadline.seconds_since_start(), 0.0);
    if (caller_error(result)) throw Error(status_of(result), "split of " + describe() + " failed: " + text);
    failed("split", result);
  }
  if (child == nullptr) return nullptr;
  int child_rank = 0, child_size = 0;
  const ncclResult_t r1 = ncclCommUserRank(child, &child_rank);
  const ncclResult_t r2 = ncclCommCount(child, &child_size);
  if (r1 != ncclSuccess || r2 != ncclSuccess) {
    static_cast<void>(ncclCommAbort(child));
    check_nccl(r1 != ncclSuccess ? r1 : r2, "ncclCommUserRank/ncclCommCount", "split of " + describe());
  }
  std::unique_ptr<Communicator> made(
      new Communicator(child, device_, child_rank, child_size, timeout_ms_, child_name, {}));
  made->prepare();
  made->members_ = made->gather_world_ranks(members_[static_cast<std::size_t>(rank_)]);
  return made;
}

std::vector<int32_t> Communicator::gather_world_ranks(int32_t my_world_rank) {
  // Which world ranks a split holds is known only collectively: gather them once, so messages
  // can name ranks as the job knows them.
  members_.assign(static_cast<std::size_t>(size_), -1);
  const CurrentDevice current(device_);
  void* raw = nullptr;
  const std::size_t bytes = sizeof(int32_t) * (static_cast<std::size_t>(size_) + 1);
  PLX_NCCL_CUDA(cudaMalloc(&raw, bytes), describe());
  const std::unique_ptr<void, DeviceFree> memory(raw);
  auto* mine = static_cast<int32_t*>(raw);
  PLX_NCCL_CUDA(cudaMemcpyAsync(mine, &my_world_rank, sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
                describe());
  wait(start("split", stream_, [&] { return ncclAllGather(mine, mine + 1, 1, ncclInt32, comm_, stream_); }),
       0);
  std::vector<int32_t> ranks(static_cast<std::size_t>(size_));
  PLX_NCCL_CUDA(cudaMemcpyAsync(ranks.data(), mine + 1, sizeof(int32_t) * ranks.size(),
                                cudaMemcpyDeviceToHost, stream_),
                describe());
  PLX_NCCL_CUDA(cudaStreamSynchronize(stream_), describe());
  return ranks;
}

// ---- operations ----

template <class Body>
Request* Communicator::start(const char* op, cudaStream_t stream, Body&& body) {
  std::unique_lock<std::mutex> lock(mutex_);
  expect_usable(op);
  const CurrentDevice current(device_);
  const Deadline deadline = Deadline::after_ms(timeout_ms_);
  const ncclResult_t result = await_nccl(comm_, body(), deadline);
  if (result != ncclSuccess) {
    const std::string text = nccl_text(result, comm_);
    lock.unlock();
    if (result == ncclInProgress) timed_out(op, deadline.limit_ms(), deadline.seconds_since_start(), 0.0);
    if (caller_error(result))  // refused before anything ran: the communicator is fine
      throw Error(status_of(result), std::string(op) + " on " + describe() + " was refused by NCCL: " + text);
    failed(op, result);
  }
  cudaEvent_t event = take_event();
  lock.unlock();  // give_back below takes the lock itself
  const cudaError_t recorded = cudaEventRecord(event, stream);
  if (recorded != cudaSuccess) {
    give_back(event);
    check_cuda(recorded, "cudaEventRecord", std::string(op) + " on " + describe());
  }
  return new Request{this, event, op, Clock::now()};
}

Request* Communicator::all_reduce(const DLTensor* send, DLTensor* recv, int32_t op, cudaStream_t stream) {
  const Buffer s = buffer_of(send, device_, Use::reduce, "send");
  const Buffer r = buffer_of(recv, device_, Use::reduce, "recv");
  expect_same_dtype(s, r);
  if (s.count != r.count)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "send has " + std::to_string(s.count) + " elements, recv " +
                                              std::to_string(r.count) + " (they must be equal)");
  const ncclRedOp_t red = reduce_op(op);
  return start("all_reduce", stream,
               [&] { return ncclAllReduce(s.data, r.data, s.count, s.type, red, comm_, stream); });
}

Request* Communicator::all_gather(const DLTensor* send, DLTensor* recv, cudaStream_t stream) {
  const Buffer s = buffer_of(send, device_, Use::move, "send");
  const Buffer r = buffer_of(recv, device_, Use::move, "recv");
  expect_same_dtype(s, r);
  if (r.count != s.count * static_cast<std::size_t>(size_))
    throw Error(PLX_ERR_INVALID_ARGUMENT, "recv has " + std::to_string(r.count / r.scale) +
                                              " elements, but must hold " + std::to_string(size_) +
                                              " x send (" + std::to_string(s.count / s.scale) + ")");
  return start("all_gather", stream,
               [&] { return ncclAllGather(s.data, r.data, s.count, s.type, comm_, stream); });
}

Request* Communicator::reduce_scatter(const DLTensor* send, DLTensor* recv, int32_t op, cudaStream_t stream) {
  const Buffer s = buffer_of(send, device_, Use::reduce, "send");
  const Buffer r = buffer_of(recv, device_, Use::reduce, "recv");
  expect_same_dtype(s, r);
  if (s.count != r.count * static_cast<std::size_t>(size_))
    throw Error(PLX_ERR_INVALID_ARGUMENT, "send has " + std::to_string(s.count) +
                                              " elements, but must hold " + std::to_string(size_) +
                                              " x recv (" + std::to_string(r.count) + ")");
  const ncclRedOp_t red = reduce_op(op);
  return start("reduce_scatter", stream,
               [&] { return ncclReduceScatter(s.data, r.data, r.count, s.type, red, comm_, stream); });
}

Request* Communicator::all_to_all_v(const DLTensor* send, const int64_t* send_counts,
                                    const int64_t* send_offsets, DLTensor* recv, const int64_t* recv_counts,
                                    const int64_t* recv_offsets, cudaStream_t stream) {
  const Buffer s = buffer_of(send, device_, Use::move, "send");
  const Buffer r = buffer_of(recv, device_, Use::move, "recv");
  expect_same_dtype(s, r);
  if (send_counts == nullptr || send_offsets == nullptr || recv_counts == nullptr || recv_offsets == nullptr)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "counts and offsets must be arrays of " + std::to_string(size_) + " entries, not null");
  auto check = [&](const Buffer& b, const int64_t* counts, const int64_t* offsets, const char* what) {
    const int64_t elements = static_cast<int64_t>(b.count / b.scale);
    for (int32_t p = 0; p < size_; ++p)
      if (counts[p] < 0 || offsets[p] < 0 || offsets[p] > elements || counts[p] > elements - offsets[p])
        throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(what) + " chunk of rank " + std::to_string(p) +
                                                  " (offset " + std::to_string(offsets[p]) + ", count " +
                                                  std::to_string(counts[p]) + ") is outside its " +
                                                  std::to_string(elements) + " elements");
  };
  check(s, send_counts, send_offsets, "the send");
  check(r, recv_counts, recv_offsets, "the recv");
  const std::size_t element_bytes = std::size_t{s.dtype.bits} * s.dtype.lanes / 8;
  auto* send_bytes = static_cast<const char*>(s.data);
  auto* recv_bytes = static_cast<char*>(r.data);
  return start("all_to_all_v", stream, [&] {
    // One group of point-to-point transfers (the chunk for this rank itself included): NCCL
    // schedules them together, so no order between peers can deadlock.
    ncclResult_t first = ncclGroupStart();
    if (first != ncclSuccess) return first;
    for (int32_t p = 0; p < size_ && first == ncclSuccess; ++p) {
      const auto at = [&](const int64_t* offsets) {
        return static_cast<std::size_t>(offsets[p]) * element_bytes;
      };
      const auto n = [&](const int64_t* counts) { return static_cast<std::size_t>(counts[p]) * s.scale; };
      if (send_counts[p] > 0)
        first = ncclSend(send_bytes + at(send_offsets), n(send_counts), s.type, p, comm_, stream);
      if (first == ncclSuccess && recv_counts[p] > 0)
        first = ncclRecv(recv_bytes + at(recv_offsets), n(recv_counts), r.type, p, comm_, stream);
    }
    const ncclResult_t end = ncclGroupEnd();  // always closes the group, also after an error
    return first != ncclSuccess ? first : end;
  });
}

Request* Communicator::broadcast(DLTensor* buffer, int32_t root, cudaStream_t stream) {
  const Buffer b = buffer_of(buffer, device_, Use::move, "buffer");
  if (root < 0 || root >= size_)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "root " + std::to_string(root) + " is not a rank of " + describe());
  return start("broadcast", stream,
               [&] { return ncclBroadcast(b.data, b.data, b.count, b.type, root, comm_, stream); });
}

Request* Communicator::send(const DLTensor* buffer, int32_t peer, cudaStream_t stream) {
  const Buffer b = buffer_of(buffer, device_, Use::move, "buffer");
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw Error(
        PLX_ERR_INVALID_ARGUMENT,
        "peer " + std::to_string(peer) + " is not another rank of " + describe() +
            (peer == rank_ ? " (a send to itself would wait forever for its recv: copy locally)" : ""));
  return start("send", stream, [&] { return ncclSend(b.data, b.count, b.type, peer, comm_, stream); });
}

Request* Communicator::recv(DLTensor* buffer, int32_t peer, cudaStream_t stream) {
  const Buffer b = buffer_of(buffer, device_, Use::move, "buffer");
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw Error(
        PLX_ERR_INVALID_ARGUMENT,
        "peer " + std::to_string(peer) + " is not another rank of " + describe() +
            (peer == rank_ ? " (a recv from itself would wait forever for its send: copy locally)" : ""));
  return start("recv", stream, [&] { return ncclRecv(b.data, b.count, b.type, peer, comm_, stream); });
}

void Communicator::barrier() {
  wait(start("barrier", stream_,
             [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_); }),
       0);
}

// ---- requests ----

void Communicator::wait(Request* request, uint32_t timeout_ms) {
  if (request == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null request");
  struct Release {  // exactly one wait releases a request, whatever happens in it
    Communicator* comm;
    Request* request;
    ~Release() {
      comm->give_back(request->event);
      delete request;
    }
  } release{this, request};
  const uint32_t limit = timeout_ms != 0 ? timeout_ms : timeout_ms_;
  const Deadline deadline = Deadline::after_ms(limit);
  Backoff backoff;
  for (;;) {
    const cudaError_t query = cudaEventQuery(request->event);
    if (query == cudaSuccess) return;
    check_async(request->op);
    if (query != cudaErrorNotReady)
      check_cuda(query, "cudaEventQuery",
                 std::string(request->op) + " on " + describe() + " (the GPU failed)");
    if (deadline.passed()) {
      const double started = std::chrono::duration<double>(Clock::now() - request->started).count();
      timed_out(request->op, limit, deadline.seconds_since_start(), started);
    }
    backoff.pause();
  }
}

bool Communicator::test(Request* request) {
  if (request == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null request");
  const cudaError_t query = cudaEventQuery(request->event);
  if (query == cudaSuccess) return true;
  check_async(request->op);
  if (query != cudaErrorNotReady)
    check_cuda(query, "cudaEventQuery", std::string(request->op) + " on " + describe() + " (the GPU failed)");
  return false;
}

cudaEvent_t Communicator::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  PLX_NCCL_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), describe());
  return e;
}

void Communicator::give_back(cudaEvent_t event) noexcept {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  // After a failure the event may still be pending on an aborted stream: let CUDA release it
  // when it completes instead of reusing it.
  if (!lock.owns_lock() || broken_ || free_events_.size() >= 64) {
    static_cast<void>(cudaEventDestroy(event));
    return;
  }
  try {
    free_events_.push_back(event);
  } catch (...) {
    static_cast<void>(cudaEventDestroy(event));
  }
}

// ---- failures ----

void Communicator::expect_usable(const char* op) const {
  if (broken_) throw Error(PLX_ERR_COMM, describe() + " cannot be used for " + op + ": " + broken_reason_);
}

void Communicator::check_async(const char* op) {
  ncclResult_t state = ncclSuccess;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    expect_usable(op);
    const ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
    if (query != ncclSuccess) state = query;
  }
  if (state != ncclSuccess && state != ncclInProgress) failed(op, state);
}

void Communicator::failed(const char* op, ncclResult_t result) {
  std::string text;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    text = comm_ != nullptr ? nccl_text(result, comm_) : ncclGetErrorString(result);
  }
  const std::string message =
      std::string(op) + " on " + describe() + " failed: " + text +
      ". A peer may have died or lost its connection; NCCL does not say which: " + missing_ranks() +
      ". The communicator was aborted and cannot be used again";
  abort_nccl(message);
  throw Error(PLX_ERR_COMM, message);
}

void Communicator::timed_out(const char* op, uint64_t limit_ms, double waited_s, double started_s) {
  std::string state;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    ncclResult_t async = ncclSuccess;
    if (comm_ != nullptr && ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress)
      state = " NCCL reports: " + nccl_text(async, comm_) + ".";
  }
  std::string message = std::string(op) + " on " + describe() + " did not complete within " +
                        std::to_string(limit_ms) + " ms (waited " + seconds_text(waited_s);
  if (started_s > 0) message += ", started " + seconds_text(started_s) + " ago";
  message += "). NCCL cannot tell which rank did not take part: " + missing_ranks() +
             " (dead, stopped, or still behind)." + state +
             " The communicator was aborted and cannot be used again";
  abort_nccl(message);
  throw Error(PLX_ERR_TIMEOUT, message);
}

void Communicator::abort_nccl(const std::string& reason) noexcept {
  std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
  for (int i = 0; i < 1000 && !lock.try_lock(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (lock.owns_lock() && !broken_) {
    try {
      broken_reason_ = "it was aborted after: " + reason;
    } catch (...) {
    }
  }
  broken_ = true;
  if (comm_ == nullptr) return;
  // NCCL allows an abort from another thread while a call on the communicator is stuck: that is
  // how a job-wide abort reaches a rank blocked in NCCL.
  static_cast<void>(ncclCommAbort(comm_));
  comm_ = nullptr;
}

std::string Communicator::describe() const {
  return "NCCL communicator '" + name_ + "' (rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
         " on cuda:" + std::to_string(device_) + ")";
}

std::string Communicator::missing_ranks() const {
  if (size_ == 1)
    return "no other rank takes part, so the GPU did not finish the work (something before it on the stream "
           "may be "
           "stuck)";
  std::vector<int32_t> world, local;
  for (int32_t r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    local.push_back(r);
    const int32_t w =
        static_cast<std::size_t>(r) < members_.size() ? members_[static_cast<std::size_t>(r)] : -1;
    if (w >= 0) world.push_back(w);
  }
  if (name_ == "world") return "one or more of ranks " + rendezvous::format_ranks(local);
  std::string text = "one or more of ranks " + rendezvous::format_ranks(local) + " of this communicator";
  if (world.size() == local.size()) text += " (world ranks " + rendezvous::format_ranks(world) + ")";
  return text;
}

void abort_all(const std::string& reason) noexcept {
  std::vector<Communicator*> all;
  try {
    const std::lock_guard<std::mutex> lock(registry_mutex());
    all.assign(registry().begin(), registry().end());
  } catch (...) {
  }
  for (Communicator* c : all) c->abort_nccl(reason);
}

}  // namespace plexus::comm_nccl
