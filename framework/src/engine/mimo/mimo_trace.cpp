// train.trace in a MIMO run: the steps it names are recorded on every rank (one Timeline for the
// modules a rank holds) and written by world rank 0 as one Chrome / Perfetto trace, a process per
// rank named by its modules, stages and lanes. scripts/plot_trace.py draws it and measures each
// rank's bubble against 1F1B's over the modules' pipeline (the start record's "pipeline").
#include <string>

#include "engine/mimo/mimo_schedule.hpp"
#include "engine/mimo/mimo_trainer_impl.hpp"

namespace plexus {
namespace {

// "rank 2 (language: stage 1 of 2, dp 0)"; colocated "rank 0 (images dp 0, language dp 0)".
std::string rank_name(const distributed::Runtime* runtime, const std::vector<MimoModule>& modules) {
  std::string name = "rank " + std::to_string(runtime != nullptr ? runtime->rank() : 0) + " (";
  bool first = true;
  for (const MimoModule& m : modules) {
    if (!m.here) continue;
    name += (first ? "" : ", ") + m.name;
    if (m.stages > 1) name += ": stage " + std::to_string(m.stage) + " of " + std::to_string(m.stages) + ",";
    name += " dp " + std::to_string(m.dp_rank);
    first = false;
  }
  return name + ")";
}

}  // namespace

void MimoTrainer::Impl::start_trace() {
  timeline = std::make_unique<Timeline>(DLDevice{kDLCPU, 0});
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) models[m]->set_timeline(timeline.get());
}

void MimoTrainer::Impl::trace_before_step(int64_t step) {
  if (!timeline || step != trace_first) return;
  // The ranks leave the barrier together: their clocks start within its exit skew.
  if (runtime != nullptr && runtime->world_size() > 1) runtime->world().barrier();
  timeline->set_origin();
  timeline->record(true);
}

void MimoTrainer::Impl::trace_after_step(int64_t step, const TrainerEvents& events) {
  if (!timeline || !timeline->recording() || (step + 1 != trace_end && step + 1 != steps)) return;
  if (const auto record = write_job_trace(*timeline, runtime, rank_name(runtime, modules), output_dir,
                                          trace_first + 1, step + 1))
    write_metrics(*record, events);
}

}  // namespace plexus
