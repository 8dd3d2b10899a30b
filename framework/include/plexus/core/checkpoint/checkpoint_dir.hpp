// Checkpoint directories: one per saved step, written so that a run stopped at any moment
// (crash, kill, power loss) leaves either a complete checkpoint or one that is recognizably not.
//
//   <root>/step_00001000/
//     model.safetensors      the model's parameters
//     optimizer.safetensors  the optimizer's state
//     state.json             free-form JSON from the caller: step, RNG, data position, config...
//     COMPLETE               written last, after everything above is on disk
//
// Writing goes into "<root>/.step_<8-digit step>.partial-<pid>/": the files are written and
// fsynced, then COMPLETE, then the directory is renamed to step_<8-digit step> and the root is
// fsynced. So a directory named step_* is complete unless someone tampered with it, and one
// left half-written has a ".partial" name that listing ignores and pruning removes. The COMPLETE
// marker (JSON: the step, each file's size and tensor count) is checked when loading too, so a
// checkpoint whose files were later truncated or replaced is refused; and each tensor's checksum,
// recorded in its file when written (integrity.hpp), so one whose bytes changed is refused too,
// naming the tensor.
//
// Steps with more than 8 digits are written with as many digits as they need.
// One process writes a root at a time (rank 0, say): pruning treats a partial directory as
// stale when the process named by its pid no longer exists on this machine.
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/integrity.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"

namespace plexus::checkpoint {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kCompleteMarker = "COMPLETE";

// "step_00001000" for step 1000.
[[nodiscard]] std::string checkpoint_dir_name(std::int64_t step);

// Writes a checkpoint of step under root (created if missing) and returns its directory. A
// checkpoint of the same step that already exists is replaced atomically (the old one stays
// whole until the new one is complete). On failure nothing named step_* is created or changed
// and the partial directory is removed. Throws std::invalid_argument for a negative step or
// invalid tensors (see SafetensorsWriter::add), CheckpointError for I/O failures. Both
// safetensors files carry "plexus.step" and the entries of `metadata` in their "__metadata__".
std::filesystem::path write_checkpoint(const std::filesystem::path& root, std::int64_t step,
                                       std::span<const TensorData> model_tensors,
                                       std::span<const TensorData> optimizer_tensors,
                                       const boost::json::value& state,
                                       const std::map<std::string, std::string>& metadata = {});

// What a rank that does not write runs beside the one that calls write_checkpoint: every fill of
// the tensors (TensorData::fill), in the order write_checkpoint calls them, the bytes discarded.
// Fills that communicate (a sharded model gathered unit by unit) thus meet on every rank.
void run_checkpoint_fills(std::span<const TensorData> model_tensors, std::span<const TensorData> optimizer_tensors);

// Writes a checkpoint into the directory dir, which must not exist (tools that derive a
// checkpoint from another, such as `plexus checkpoint convert`, never replace anything): the files
// are written under ".<name>.partial-<pid>" beside it, COMPLETE last, then the directory is renamed
// to dir without replacement and the parent is fsynced. Missing parents are created. A dir named
// step_<8+ digits> must name this step (loading checks it). On failure nothing is created at dir
// and the partial directory is removed. Throws std::invalid_argument for a negative step, a
// mismatching step name or invalid tensors; CheckpointError naming dir when it exists (also when it
// appears while writing) or for I/O failures. The files' metadata as write_checkpoint's.
std::filesystem::path create_checkpoint(const std::filesystem::path& dir, std::int64_t step,
                                        std::span<const TensorData> model_tensors,
                                        std::span<const TensorData> optimizer_tensors,
                                        const boost::json::value& state,
                                        const std::map<std::string, std::string>& metadata = {});

struct CheckpointInfo {
  std::int64_t step = 0;
  std::filesystem::path dir;
};

// An entry of a root that is not a complete checkpoint, and why.
struct SkippedEntry {
  std::filesystem::path path;
  std::string reason;  // e.g. "partial checkpoint (being written, or left by a run that stopped)"
};

struct CheckpointScan {
  std::vector<CheckpointInfo> complete;  // sorted by step
  std::vector<SkippedEntry> skipped;     // sorted by name
};

// Everything in root: complete checkpoints and the entries skipped with their reasons. A root
// that does not exist has no checkpoints; one that is not a directory is a CheckpointError.
[[nodiscard]] CheckpointScan scan_checkpoints(const std::filesystem::path& root);
// The complete checkpoints in root, sorted by step. Each skipped entry is logged at debug
// level (Logger::global().set_level(LogLevel::debug)) with its reason.
[[nodiscard]] std::vector<CheckpointInfo> list_checkpoints(const std::filesystem::path& root);
// The complete checkpoint with the highest step, if any.
[[nodiscard]] std::optional<CheckpointInfo> latest_checkpoint(const std::filesystem::path& root);

// Removes the complete checkpoints older than the newest keep_last_k, and partial directories
// left by processes that no longer run (never one this process is writing). Entries that are
// not checkpoints, and step_* directories without COMPLETE, are left alone. Returns what was
// removed. Throws std::invalid_argument when keep_last_k < 1, CheckpointError on I/O failure.
std::vector<std::filesystem::path> prune_checkpoints(const std::filesystem::path& root, std::int64_t keep_last_k);

struct LoadedCheckpoint {
  std::filesystem::path dir;
  std::int64_t step = 0;  // from the COMPLETE marker
  SafetensorsFile model;
  SafetensorsFile optimizer;
  boost::json::value state;
  // The tensor count of each safetensors file as the COMPLETE marker records it (empty for a
  // checkpoint written before the marker recorded them).
  std::map<std::string, std::uint64_t> recorded_tensor_counts{};
};

// What load_checkpoint checks beyond the structure.
enum class Verify : std::uint8_t {
  full,       // every tensor's checksum and values, and the files against each other (verify_checkpoint)
  structure,  // the structure only: for tools that show a checkpoint as it is (inspect)
};

// Everything verify_checkpoint found.
struct CheckpointCheck {
  std::vector<FileCheck> files;  // model.safetensors, optimizer.safetensors
  // Disagreements between the files: "<file>: <what>", e.g. a step that differs from the COMPLETE
  // marker's, a tensor count other than the one recorded.
  std::vector<std::string> consistency;
  [[nodiscard]] bool ok() const noexcept;
  // Every problem, one per line, each starting with the file's path: "<file>: tensor <name>: ...".
  [[nodiscard]] std::vector<std::string> problems() const;
};

// Verifies a loaded checkpoint: each safetensors file's tensors (verify_file: the checksums the
// writer recorded, finite values), and that the files agree with each other and with the COMPLETE
// marker: state.json's "step" and each file's "plexus.step" metadata (when present) are the
// marker's step, and each file has the number of tensors the marker records (when it does).
// Reads every byte of both files.
[[nodiscard]] CheckpointCheck verify_checkpoint(const LoadedCheckpoint& loaded);

// Opens and validates a checkpoint directory: COMPLETE present and consistent with the files,
// both safetensors files valid (see parse_layout), state.json valid JSON; with Verify::full (the
// default) also verify_checkpoint, and every problem it finds is one CheckpointError naming the
// directory and listing each bad tensor with its file. A file written before checksums were
// recorded loads (its values checked) with a log line saying so. Every problem is a
// CheckpointError naming the file: a missing COMPLETE marker reads "incomplete checkpoint (no
// COMPLETE marker): it was being written when the run stopped". Files that are not regular files
// (a FIFO, a device) are refused, never waited on.
[[nodiscard]] LoadedCheckpoint load_checkpoint(const std::filesystem::path& dir,
                                               ReadMode mode = ReadMode::map, Verify verify = Verify::full);

// What the model expects of one tensor.
struct ExpectedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::optional<DType> dtype;  // nullopt: any dtype
};

// Every difference between a loaded file and what is expected, one line each, in the order of
// expected (then the unexpected tensors by name):
//   "checkpoint tensor <name>: expected shape [512, 128], found [256, 128]"
//   "checkpoint tensor <name>: expected dtype F32, found BF16"
//   "checkpoint tensor <name>: missing (expected shape [512, 128])"
//   "checkpoint tensor <name>: not expected (found shape [3], F32)"
// Throws std::invalid_argument when expected names a tensor twice.
[[nodiscard]] std::vector<std::string> tensor_mismatches(const SafetensorsFile& loaded,
                                                         std::span<const ExpectedTensor> expected);
// Throws one CheckpointError naming the file and listing every mismatch, if there is any.
void expect_tensors_match(const SafetensorsFile& loaded, std::span<const ExpectedTensor> expected);

}  // namespace plexus::checkpoint
