// Stopping a run early on request (TrainerEvents::stop_signal: SIGTERM or SIGINT for
// plexus-train): the ranks agree at a step boundary, so that they all stop after the same step,
// and the run ends with a checkpoint of that step, which --resume continues exactly. And at
// train.exit_interval, the same way without a signal.
#include <boost/json.hpp>

#include "engine/stop_agreement.hpp"
#include "engine/trainer_impl.hpp"
#include "plexus/core/engine/stop_signals.hpp"

namespace plexus {

std::optional<Interruption> Trainer::Impl::agreed_stop(const TrainerEvents& events,
                                                       int64_t steps_done) const {
  return agree_on_stop(events, runtime, steps_done);
}

void Trainer::Impl::stop_run(const Interruption& stop, int64_t saved_step, detail::Progress& progress,
                             TrainResult& result, const TrainerEvents& events) {
  const std::string name = signal_name(stop.signal);
  const std::string received =
      name + " received" +
      (runtime != nullptr && runtime->world_size() > 1 ? " (first by rank " + std::to_string(stop.rank) + ")"
                                                       : "");
  const std::string step = std::to_string(stop.step);
  const bool trained = stop.step > start_step;
  if (writer)
    progress.line(trained ? received + ": stopping after step " + step + ", writing a checkpoint"
                          : received + " before the first step: nothing trained, nothing to save");
  // A checkpoint of this step written a moment ago (the periodic one, during which the signal
  // came) is the one to resume from; writing it again would only delay the exit.
  if (trained && saved_step != stop.step) result.last_checkpoint = save_checkpoint(stop.step);
  boost::json::object record{
      {"event", "interrupted"}, {"step", stop.step}, {"signal", name}, {"rank", stop.rank}};
  record["checkpoint"] = trained ? boost::json::value(result.last_checkpoint.string()) : nullptr;
  write_metrics(record, events);
  if (writer && trained)
    progress.line("checkpoint: " + result.last_checkpoint.string() + " (step " + step +
                  "); resume with --resume latest");
  result.interrupted = stop;
}

void Trainer::Impl::exit_run(int64_t step, int64_t saved_step, detail::Progress& progress,
                             TrainResult& result, const TrainerEvents& events) {
  if (saved_step != step) result.last_checkpoint = save_checkpoint(step);
  write_metrics({{"event", "exit"},
                 {"step", step},
                 {"reason", "train.exit_interval"},
                 {"checkpoint", result.last_checkpoint.string()}},
                events);
  if (writer)
    progress.line("train.exit_interval: exiting after step " + std::to_string(step) + " of " +
                  std::to_string(steps) + "; checkpoint " + result.last_checkpoint.string() +
                  ", resume with --resume latest");
  result.exited_at = step;
}

}  // namespace plexus
