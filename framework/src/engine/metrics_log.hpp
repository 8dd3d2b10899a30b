// Where a run's records go, for both trainers (world rank 0's): <run.output_dir>/metrics.jsonl,
// one JSON object a line, flushed per record so a crashed run keeps what it wrote (a write that
// fails ends the run naming the file and the record); TensorBoard event files under
// train.tensorboard_dir when it is set (the steps' and evaluations' numbers: the other records
// describe the run); and the caller's TrainerEvents::on_metrics.
#pragma once

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <memory>

#include "engine/tensorboard_writer.hpp"
#include "plexus/core/engine/trainer.hpp"

namespace plexus {

class MetricsLog {
 public:
  // Appends to output_dir/metrics.jsonl (created with its directory); an empty tensorboard_dir
  // writes no events.
  void open(const std::filesystem::path& output_dir, const std::filesystem::path& tensorboard_dir);
  void write(const boost::json::object& record, const TrainerEvents& events);
  // The TensorBoard writer (for text samples), or nullptr when there is none.
  TensorBoardWriter* tensorboard() const noexcept { return tensorboard_.get(); }

 private:
  std::filesystem::path file_;
  std::ofstream out_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace plexus
