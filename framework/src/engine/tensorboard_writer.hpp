// TensorBoard event files (train.tensorboard_dir): the metrics stream's numbers as scalars and the
// text samples as text summaries, in the format TensorBoard reads (TFRecord framing of Event
// protocol buffers), written without TensorFlow or protobuf: the few message fields it needs are
// encoded here.
//
// A file events.out.tfevents.<seconds>.<host>.<pid>.plexus per run, opened at start; each record
// is flushed when written, so a dashboard follows a running job and a crashed run keeps its
// records.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

namespace plexus {

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new event file in it. Throws std::runtime_error naming the file
  // when it cannot be written.
  explicit TensorBoardWriter(const std::filesystem::path& dir);

  // The numbers of a metrics record (metrics.jsonl's "step" or "eval"): every number at the top
  // level under its key ("loss", "lr", "val_loss", a plugin's "moe/layer0.aux_loss", ...), and
  // the elements of number arrays as "<key>/<i>" ("mtp_losses/0"), at the record's "step".
  // Records without a step (start) and other fields (strings, objects) are left out.
  void write_record(const boost::json::object& record);
  // One scalar and one text summary (TensorBoard's text plugin, Markdown).
  void scalar(std::string_view tag, int64_t step, double value);
  void text(std::string_view tag, int64_t step, std::string_view text);

  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  void write_event(int64_t step, std::string_view summary);  // summary: an encoded Summary message
  void write_record_bytes(std::string_view data);

  std::filesystem::path file_;
  std::ofstream out_;
};

namespace tensorboard_detail {
// CRC-32C (Castagnoli) and the TFRecord framing's masking of it; exposed for the unit test.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);
}  // namespace tensorboard_detail

}  // namespace plexus
