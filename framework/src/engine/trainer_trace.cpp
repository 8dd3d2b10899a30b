// train.trace: the steps it names are recorded on every rank (Timeline) and written by world
// rank 0 as one Chrome / Perfetto trace, a process per rank (gather_trace_events).
#include "engine/trainer_impl.hpp"

namespace plexus {
namespace {

// What a rank is, as its process is named in the trace.
std::string rank_name(const distributed::Runtime* runtime, const distributed::Communicator* pp,
                      int64_t dp_rank) {
  if (runtime == nullptr) return "rank 0";
  std::string name = "rank " + std::to_string(runtime->rank()) + " (";
  if (pp != nullptr) name += "pp " + std::to_string(pp->rank()) + ", ";
  return name + "dp " + std::to_string(dp_rank) + ")";
}

}  // namespace

void Trainer::Impl::trace_before_step(int64_t step) {
  if (!timeline || step != trace_first) return;
  barrier();  // the ranks leave it together: their clocks start within its exit skew
  timeline->set_origin();
  timeline->record(true);
}

void Trainer::Impl::trace_after_step(int64_t step, const TrainerEvents& events) {
  if (!timeline || !timeline->recording() || (step + 1 != trace_end && step + 1 != steps)) return;
  if (const auto record = write_job_trace(*timeline, runtime, rank_name(runtime, pp, dp_rank), output_dir,
                                          trace_first + 1, step + 1))
    write_metrics(*record, events);
}

}  // namespace plexus
