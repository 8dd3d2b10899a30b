// The communicator's worker thread, its liveness side channel, and the diagnosis of a timeout.
#include "communicator.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include "plexus/cpp/error.hpp"

namespace plexus::comm_mpi {
namespace {

using plexus::sdk::Error;
using std::chrono::milliseconds;

// Tags on the side channel (a duplicate communicator: no user message can match them).
constexpr int kProbeTag = 1;
constexpr int kAnswerTag = 2;

// Polling. After an operation starts or completes the worker polls MPI back to back, yielding
// the CPU between polls, for kSpin; then it pauses between polls for 1/16 of the time since the
// last activity, at most kMaxPause, so a long wait for a slow peer costs little CPU; but while a
// thread is blocked in wait on this communicator, never more than kMinPause, so what it waits
// for (a pipeline stage's input, say) is seen within microseconds of arriving. With nothing
// in flight it looks at the side channel every kIdlePoll, which bounds how late a probe is
// answered (the prober's grace period is at least 200 ms).
constexpr auto kSpin = std::chrono::microseconds(1000);
constexpr auto kMinPause = std::chrono::microseconds(20);
constexpr auto kMaxPause = std::chrono::microseconds(1000);
constexpr auto kIdlePoll = milliseconds(20);
constexpr auto kAnswersAtExit = milliseconds(2000);

std::string join_numbers(const std::vector<int32_t>& values) {
  std::string text;
  for (std::size_t i = 0; i < values.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(values[i]);
  return text;
}

}  // namespace

Communicator::Communicator(std::shared_ptr<Runtime> runtime, MPI_Comm comm, MPI_Comm probe_comm,
                           std::string label, uint32_t timeout_ms, int64_t chunk_elements)
    : runtime_(std::move(runtime)),
      comm_(comm),
      probe_comm_(probe_comm),
      label_(std::move(label)),
      timeout_ms_(timeout_ms),
      chunk_elements_(chunk_elements) {
  // Errors come back as codes (turned into PLX_ERR_COMM with MPI's text) instead of aborting.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(probe_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  int compare = MPI_UNEQUAL;
  MPI_Comm_compare(comm_, MPI_COMM_WORLD, &compare);
  if (compare != MPI_IDENT && compare != MPI_CONGRUENT) {
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Group world = MPI_GROUP_NULL;
    MPI_Comm_group(comm_, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int32_t> ranks(static_cast<std::size_t>(size_));
    for (int32_t r = 0; r < size_; ++r) ranks[static_cast<std::size_t>(r)] = r;
    world_ranks_.resize(ranks.size());
    MPI_Group_translate_ranks(group, size_, ranks.data(), world, world_ranks_.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world);
  }
  ++runtime_->live_communicators;
  worker_ = std::thread([this] {
    try {
      worker_loop();
    } catch (const std::exception& e) {  // not expected: every MPI call reports by status
      make_unusable(std::string("the communicator's worker thread failed: ") + e.what());
      leaked_ = true;
    }
  });
}

Communicator::~Communicator() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
  if (leaked_) {
    // MPI still owns requests of this communicator: freeing it or finalizing could block.
    runtime_->leave_unfinalized();
  } else {
    MPI_Comm_free(&probe_comm_);
    MPI_Comm_free(&comm_);
  }
  --runtime_->live_communicators;
}

std::string Communicator::context() const {
  return label_ + ", " + std::to_string(size_) + (size_ == 1 ? " rank" : " ranks");
}

std::string Communicator::rank_name(int32_t rank) const {
  std::string name = "rank " + std::to_string(rank);
  if (!world_ranks_.empty() && rank >= 0 && rank < size_)
    name += " (world rank " + std::to_string(world_ranks_[static_cast<std::size_t>(rank)]) + ")";
  return name;
}

std::string Communicator::ranks_text(const std::vector<int32_t>& ranks) const {
  if (ranks.size() == 1) return rank_name(ranks[0]);
  std::string text = "ranks " + join_numbers(ranks);
  if (!world_ranks_.empty()) {
    std::vector<int32_t> world;
    for (int32_t r : ranks) world.push_back(world_ranks_[static_cast<std::size_t>(r)]);
    text += " (world ranks " + join_numbers(world) + ")";
  }
  return text;
}

std::shared_ptr<Operation> Communicator::submit(std::shared_ptr<Operation> op) {
  {
    std::lock_guard lock(mutex_);
    if (!unusable_.empty())
      throw Error(PLX_ERR_COMM, op->name + " (" + context() +
                                    "): the communicator is unusable after an earlier failure (" + unusable_ +
                                    "); the job has to abort");
    if (op->collective) {
      op->seq = static_cast<uint64_t>(reached_.load()) + 1;
      op->title = op->name + " #" + std::to_string(op->seq) + " (" + context() + ")";
      reached_.store(static_cast<int64_t>(op->seq));  // in queue order: reached_ changes only here
    } else {
      op->title = op->name + (op->name == "send" ? " to " : " from ") + rank_name(op->peer) + ", tag " +
                  std::to_string(op->tag) + " (" + context() + ")";
    }
    queue_.push_back(op);
  }
  wake_.notify_all();
  return op;
}

void Communicator::wait(Operation& op, uint32_t timeout_ms) {
  const uint32_t limit = timeout_ms != 0 ? timeout_ms : timeout_ms_;
  std::optional<Clock::time_point> deadline;
  if (limit != 0) deadline = Clock::now() + milliseconds(limit);
  {
    std::lock_guard lock(mutex_);
    ++waiters_;
  }
  wake_.notify_one();
  const bool done = op.wait_until(deadline);
  {
    std::lock_guard lock(mutex_);
    --waiters_;
  }
  if (!done) {
    const auto grace = milliseconds(std::clamp<uint32_t>(limit / 2, 200, 2000));
    const std::string diagnosis = diagnose(op, grace);
    if (!op.is_done()) {  // one that completed while the peers were probed is no timeout
      const std::string message =
          op.title + " did not complete within " + std::to_string(limit) + " ms: " + diagnosis;
      make_unusable(message);
      throw Error(PLX_ERR_TIMEOUT, message);
    }
  }
  std::lock_guard lock(op.mutex);
  if (op.status != PLX_OK) throw Error(op.status, op.error);
}

void Communicator::make_unusable(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (unusable_.empty()) unusable_ = reason;
}

// ---- the worker ----------------------------------------------------------------------------

void Communicator::worker_loop() {
  std::deque<std::shared_ptr<Operation>> in_flight;
  auto last_activity = Clock::now();
  std::optional<Clock::time_point> stop_started;
  for (;;) {
    std::deque<std::shared_ptr<Operation>> fresh;
    bool stopping = false;
    {
      std::lock_guard lock(mutex_);
      fresh.swap(queue_);
      stopping = stop_;
      for (auto& orphan : orphans_) sends_.push_back(std::move(orphan));
      orphans_.clear();
    }
    for (auto& op : fresh) {
      start(*op);
      if (!op->is_done()) in_flight.push_back(std::move(op));
      last_activity = Clock::now();
    }
    if (progress(in_flight)) last_activity = Clock::now();
    answer_probes();
    reap_sends(false);

    const auto now = Clock::now();
    if (stopping) {
      // Destroyed: operations already submitted may finish within the timeout (for ever without
      // one); answers to probes, which nobody waits for, within kAnswersAtExit.
      if (in_flight.empty() && sends_.empty()) return;
      if (!stop_started) stop_started = now;
      const bool operations_late =
          !in_flight.empty() && timeout_ms_ != 0 && now >= *stop_started + milliseconds(timeout_ms_);
      const bool answers_late = in_flight.empty() && now >= *stop_started + kAnswersAtExit;
      if (operations_late || answers_late) {
        for (auto& op : in_flight)
          op->complete(PLX_ERR_COMM, op->title + " was still in flight when its communicator was destroyed");
        reap_sends(true);
        leaked_ = true;
        return;
      }
    }

    std::unique_lock lock(mutex_);
    if (!queue_.empty() || stop_ != stopping) continue;
    if (in_flight.empty() && sends_.empty() && !stopping) {
      wake_.wait_for(lock, kIdlePoll, [&] { return !queue_.empty() || stop_; });
      continue;
    }
    const auto quiet = now - last_activity;
    if (quiet < kSpin) {
      lock.unlock();
      std::this_thread::yield();
      continue;
    }
    const auto pause = waiters_ > 0 ? Clock::duration(kMinPause)
                                    : std::clamp<Clock::duration>(quiet / 16, kMinPause, kMaxPause);
    wake_.wait_for(lock, pause, [&] { return !queue_.empty() || stop_ != stopping; });
  }
}

void Communicator::start(Operation& op) {
  auto fail = [&](plx_status status, const std::string& what) {
    const std::string message = op.title + ": " + what;
    for (MPI_Request request : op.requests)
      if (request != MPI_REQUEST_NULL) leaked_ = true;
    op.complete(status, message);
    make_unusable(message);
  };
  try {
    op.start(comm_, op.requests);
  } catch (const Error& e) {
    fail(e.status(), e.what());
  } catch (const std::exception& e) {
    fail(PLX_ERR_INTERNAL, e.what());
  }
}

bool Communicator::progress(std::deque<std::shared_ptr<Operation>>& in_flight) {
  bool any = false;
  for (auto it = in_flight.begin(); it != in_flight.end();) {
    Operation& op = **it;
    op.statuses.resize(op.requests.size());
    int flag = 0;
    const int code =
        MPI_Testall(static_cast<int>(op.requests.size()), op.requests.data(), &flag, op.statuses.data());
    if (code == MPI_SUCCESS && flag == 0) {
      ++it;
      continue;
    }
    any = true;
    if (code != MPI_SUCCESS) {
      int detail = code;
      if (code == MPI_ERR_IN_STATUS)
        for (const MPI_Status& status : op.statuses)
          if (status.MPI_ERROR != MPI_SUCCESS && status.MPI_ERROR != MPI_ERR_PENDING) {
            detail = status.MPI_ERROR;
            break;
          }
      for (MPI_Request request : op.requests)
        if (request != MPI_REQUEST_NULL) leaked_ = true;
      std::string message = op.title + " failed in MPI: " + mpi_error_text(detail);
      int error_class = MPI_SUCCESS;
      MPI_Error_class(detail, &error_class);
      if (error_class == MPI_ERR_TRUNCATE)
        message +=
            " (a sender's message is larger than the receiving buffer: the sizes on both sides must agree)";
      op.complete(PLX_ERR_COMM, message);
      make_unusable(message);
    } else {
      try {
        if (op.finish) op.finish();
        op.complete(PLX_OK, std::string());
      } catch (const Error& e) {
        op.complete(e.status(), op.title + ": " + e.what());
        if (e.status() == PLX_ERR_COMM) make_unusable(op.title + ": " + e.what());
      } catch (const std::exception& e) {
        op.complete(PLX_ERR_INTERNAL, op.title + ": " + e.what());
      }
    }
    if (op.collective) ++completed_;
    it = in_flight.erase(it);
  }
  return any;
}

void Communicator::answer_probes() {
  for (;;) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, kProbeTag, probe_comm_, &flag, &message, &status) != MPI_SUCCESS ||
        flag == 0)
      return;
    std::array<int64_t, 3> probe{};
    if (MPI_Mrecv(probe.data(), 3, MPI_INT64_T, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
    PendingSend answer;
    answer.buffer = std::make_unique<std::array<int64_t, 3>>(
        std::array<int64_t, 3>{probe[0], reached_.load(), completed_.load()});
    if (MPI_Isend(answer.buffer->data(), 3, MPI_INT64_T, status.MPI_SOURCE, kAnswerTag, probe_comm_,
                  &answer.request) == MPI_SUCCESS)
      sends_.push_back(std::move(answer));
  }
}

void Communicator::reap_sends(bool give_up) {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int flag = 0;
    if (MPI_Test(&it->request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag != 0) {
      it = sends_.erase(it);
    } else {
      ++it;
    }
  }
  if (give_up && !sends_.empty()) {
    // MPI may still read these buffers (a peer that resumes): they are left allocated.
    for (auto& send : sends_) static_cast<void>(send.buffer.release());
    sends_.clear();
    leaked_ = true;
  }
}

// ---- diagnosis of a timeout ----------------------------------------------------------------

std::string Communicator::diagnose(const Operation& op, std::chrono::milliseconds grace) {
  std::lock_guard probe_lock(probe_mutex_);
  const int64_t round = ++probe_round_;
  struct Probe {
    int32_t peer = -1;
    PendingSend out;
    std::array<int64_t, 3> answer{};
    MPI_Request receive = MPI_REQUEST_NULL;
    bool answered = false;
  };
  std::vector<Probe> probes;
  probes.reserve(static_cast<std::size_t>(size_));  // the answers' addresses stay put
  std::vector<int32_t> peers;
  if (op.collective) {
    for (int32_t r = 0; r < size_; ++r)
      if (r != rank_) peers.push_back(r);
  } else {
    peers.push_back(op.peer);
  }
  for (int32_t peer : peers) {
    Probe& probe = probes.emplace_back();
    probe.peer = peer;
    probe.out.buffer = std::make_unique<std::array<int64_t, 3>>(std::array<int64_t, 3>{round, 0, 0});
    MPI_Isend(probe.out.buffer->data(), 3, MPI_INT64_T, peer, kProbeTag, probe_comm_, &probe.out.request);
    MPI_Irecv(probe.answer.data(), 3, MPI_INT64_T, peer, kAnswerTag, probe_comm_, &probe.receive);
  }
  const auto deadline = Clock::now() + grace;
  for (;;) {
    bool all = true;
    for (Probe& probe : probes) {
      if (probe.answered) continue;
      int flag = 0;
      MPI_Test(&probe.receive, &flag, MPI_STATUS_IGNORE);
      if (flag != 0) {
        if (probe.answer[0] == round) {
          probe.answered = true;
        } else {  // the late answer to an earlier round
          MPI_Irecv(probe.answer.data(), 3, MPI_INT64_T, probe.peer, kAnswerTag, probe_comm_, &probe.receive);
        }
      }
      all = all && probe.answered;
    }
    if (all || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(1));
  }
  std::vector<PendingSend> unfinished;
  for (Probe& probe : probes) {
    if (!probe.answered) {
      MPI_Cancel(&probe.receive);
      MPI_Status status;
      MPI_Wait(&probe.receive, &status);
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      if (cancelled == 0 && probe.answer[0] == round) probe.answered = true;
    }
    int flag = 0;
    MPI_Test(&probe.out.request, &flag, MPI_STATUS_IGNORE);
    if (flag == 0) unfinished.push_back(std::move(probe.out));
  }
  if (!unfinished.empty()) {  // the worker tests them from now on
    std::lock_guard lock(mutex_);
    for (auto& send : unfinished) orphans_.push_back(std::move(send));
  }

  std::vector<int32_t> silent;
  std::vector<int32_t> inside;
  std::vector<std::string> clauses;
  for (const Probe& probe : probes) {
    if (!probe.answered) {
      silent.push_back(probe.peer);
      continue;
    }
    const int64_t reached = probe.answer[1];
    if (!op.collective) {
      clauses.push_back(rank_name(probe.peer) + " is alive but has not " +
                        (op.name == "send" ? "posted the matching recv" : "sent the matching message") +
                        " (tag " + std::to_string(op.tag) + ")");
    } else if (reached < static_cast<int64_t>(op.seq)) {
      clauses.push_back(rank_name(probe.peer) + " has not reached it (" +
                        (reached == 0 ? std::string("it has not started a collective on this communicator")
                                      : "it is at collective #" + std::to_string(reached)) +
                        ")");
    } else {
      inside.push_back(probe.peer);
    }
  }
  if (!silent.empty())
    clauses.insert(clauses.begin(), ranks_text(silent) + " did not respond (stopped, dead or unreachable)");
  if (clauses.empty())
    clauses.push_back(inside.empty() ? std::string("every rank reached it; MPI did not complete it")
                                     : "every rank reached it (" + ranks_text(inside) +
                                           (inside.size() == 1 ? " is" : " are") +
                                           " waiting in it too); MPI did not complete it");
  std::string text;
  for (std::size_t i = 0; i < clauses.size(); ++i) text += (i == 0 ? "" : "; ") + clauses[i];
  return text;
}

}  // namespace plexus::comm_mpi
