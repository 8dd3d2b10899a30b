// train.trace: the steps it names are recorded on every rank (Timeline) and written by world
// rank 0 as one Chrome / Perfetto trace, a process per rank. The spans travel over the job's
// world group rather than through files, so the ranks need not share a file system.
#include <algorithm>
#include <cstring>

#include "engine/trainer_impl.hpp"
#include "plexus/core/logging.hpp"

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

// Every rank's text at world rank 0 (the others get nothing): the lengths, then the bytes padded
// to the longest.
std::vector<std::string> gather_texts(const distributed::Runtime* runtime, const std::string& mine) {
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

}  // namespace

void Trainer::Impl::trace_before_step(int64_t step) {
  if (!timeline || step != trace_first) return;
  barrier();  // the ranks leave it together: their clocks start within its exit skew
  timeline->set_origin();
  timeline->record(true);
}

void Trainer::Impl::trace_after_step(int64_t step, const TrainerEvents& events) {
  if (!timeline || !timeline->recording() || (step + 1 != trace_end && step + 1 != steps)) return;
  timeline->record(false);
  const int64_t pid = runtime != nullptr ? runtime->rank() : 0;
  const std::vector<std::string> texts =
      gather_texts(runtime, timeline->trace_events(pid, rank_name(runtime, pp, dp_rank)));
  if (!writer) return;
  const std::filesystem::path file = output_dir / "trace.json";
  write_chrome_trace(file, texts);
  log_info("trainer", "trace of steps " + std::to_string(trace_first + 1) + ".." + std::to_string(step + 1) +
                          " written to " + file.string() + " (scripts/plot_trace.py draws it)");
  write_metrics({{"event", "trace"},
                 {"file", file.filename().string()},
                 {"first_step", trace_first + 1},
                 {"last_step", step + 1}},
                events);
}

}  // namespace plexus
