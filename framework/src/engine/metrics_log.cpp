#include "engine/metrics_log.hpp"

#include <stdexcept>
#include <string>
#include <string_view>

#include "plexus/core/json_text.hpp"

namespace plexus {

void MetricsLog::open(const std::filesystem::path& output_dir, const std::filesystem::path& tensorboard_dir) {
  std::filesystem::create_directories(output_dir);
  file_ = output_dir / "metrics.jsonl";
  out_.open(file_, std::ios::app);
  if (!out_) throw std::runtime_error("cannot write metrics to " + file_.string());
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
}

void MetricsLog::write(const boost::json::object& record, const TrainerEvents& events) {
  out_ << json_text(record) << '\n';
  out_.flush();  // a crashed run keeps every record written so far
  // A full disk or the file-size limit (SIGXFSZ is ignored, so the write fails instead of
  // killing the run) ends the run with a message rather than a metrics file missing its tail.
  if (!out_)
    throw std::runtime_error(file_.string() + ": cannot write a \"" +
                             std::string(record.at("event").as_string()) +
                             "\" record (disk full, or the file-size limit of ulimit -f)");
  if (tensorboard_) {
    const std::string_view event = record.at("event").as_string();
    if (event == "step" || event == "eval") tensorboard_->write_record(record);
  }
  if (events.on_metrics) events.on_metrics(record);
}

}  // namespace plexus
