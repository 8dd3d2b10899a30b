#include "plexus/core/engine/timeline.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cstring>

#include "plexus/core/checkpoint/atomic_file.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "plexus/core/logging.hpp"

namespace plexus {

Timeline::Scope::Scope(Timeline* timeline, const std::string& name, const char* category, int64_t microbatch,
                       int64_t chunk)
    : timeline_(timeline != nullptr && timeline->recording_ ? timeline : nullptr) {
  if (timeline_ == nullptr) return;
  device::synchronize(timeline_->device_);  // work queued before this span is not this span's
  span_.name = name;
  span_.category = category;
  span_.microbatch = microbatch;
  span_.chunk = chunk;
  span_.start_us = timeline_->now_us();
}

Timeline::Scope::~Scope() {
  if (timeline_ == nullptr) return;
  try {
    device::synchronize(timeline_->device_);
    span_.duration_us = timeline_->now_us() - span_.start_us;
    timeline_->spans_.push_back(std::move(span_));
  } catch (...) {
    // A destructor must not throw (this one also runs while a failed span unwinds); the span is
    // dropped and the device's next call reports what failed.
  }
}

Timeline::Timeline(DLDevice device) : device_(device) {}

double Timeline::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
}

std::string Timeline::trace_events(int64_t pid, const std::string& process_name) const {
  std::vector<boost::json::object> events;
  events.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", process_name}}}});
  events.push_back({{"ph", "M"},
                    {"name", "process_sort_index"},
                    {"pid", pid},
                    {"tid", 0},
                    {"args", {{"sort_index", pid}}}});
  for (const Span& s : spans_) {
    boost::json::object args;
    if (s.microbatch >= 0) args["microbatch"] = s.microbatch;
    if (s.chunk >= 0) args["chunk"] = s.chunk;
    events.push_back({{"ph", "X"},
                      {"name", s.name},
                      {"cat", s.category},
                      {"pid", pid},
                      {"tid", 0},
                      {"ts", s.start_us},
                      {"dur", s.duration_us},
                      {"args", std::move(args)}});
  }
  std::string text;  // one event per line: readable and diffable however long the trace
  for (const auto& event : events) {
    if (!text.empty()) text += ",\n";
    text += boost::json::serialize(event);
  }
  return text;
}

void write_chrome_trace(const std::filesystem::path& path, const std::vector<std::string>& ranks_events) {
  std::string text = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (const std::string& events : ranks_events) {
    if (events.empty()) continue;
    if (!first) text += ",\n";
    text += events;
    first = false;
  }
  text += "\n]}\n";
  checkpoint::write_file_atomically(path, std::string_view(text));
}

// The lengths, then the bytes padded to the longest.
std::vector<std::string> gather_trace_events(const distributed::Runtime* runtime, const std::string& mine) {
  if (runtime == nullptr || runtime->world_size() == 1) return {mine};
  const distributed::Communicator& world = runtime->world();
  const auto ranks = static_cast<int64_t>(world.size());
  Tensor length({1}, plx_dtype_i64());
  *length.data<int64_t>() = static_cast<int64_t>(mine.size());
  Tensor lengths({ranks}, plx_dtype_i64());
  world.all_gather(length.view(), lengths.view());
  const int64_t* each = lengths.data<int64_t>();
  const int64_t longest = std::max<int64_t>(1, *std::max_element(each, each + ranks));
  const DLDataType bytes = plx_dtype(static_cast<uint8_t>(kDLUInt), 8);
  Tensor padded({longest}, bytes);
  std::memcpy(padded.data<uint8_t>(), mine.data(), mine.size());
  Tensor all({longest * ranks}, bytes);
  world.all_gather(padded.view(), all.view());
  if (world.rank() != 0) return {};
  std::vector<std::string> texts;
  for (int64_t r = 0; r < ranks; ++r)
    texts.emplace_back(reinterpret_cast<const char*>(all.data<uint8_t>() + r * longest),
                       static_cast<std::size_t>(each[r]));
  return texts;
}

std::optional<boost::json::object> write_job_trace(Timeline& timeline, const distributed::Runtime* runtime,
                                                   const std::string& process_name,
                                                   const std::filesystem::path& output_dir,
                                                   int64_t first_step, int64_t last_step) {
  timeline.record(false);
  const int64_t pid = runtime != nullptr ? runtime->rank() : 0;
  const std::vector<std::string> texts =
      gather_trace_events(runtime, timeline.trace_events(pid, process_name));
  if (pid != 0) return std::nullopt;
  const std::filesystem::path file = output_dir / "trace.json";
  write_chrome_trace(file, texts);
  log_info("trace", "steps " + std::to_string(first_step) + ".." + std::to_string(last_step) +
                        " written to " + file.string() + " (scripts/plot_trace.py draws it)");
  return boost::json::object{{"event", "trace"},
                             {"file", file.filename().string()},
                             {"first_step", first_step},
                             {"last_step", last_step}};
}

}  // namespace plexus
