// Checkpoint directories: written under a ".partial" name and renamed when complete, listed,
// pruned and loaded with every problem named.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <mutex>
#include <set>
#include <stdexcept>
#include <system_error>

#include "plexus/core/checkpoint/atomic_file.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/json_text.hpp"
#include "plexus/core/logging.hpp"
#include "plexus/core/regular_file.hpp"

namespace plexus::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kStepPrefix = "step_";
constexpr std::string_view kPartialTag = ".partial-";
constexpr std::string_view kDeletingTag = ".deleting-";
constexpr const char* kExistsProblem = "already exists: a new checkpoint is never written over it";

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

// ".step_00000010.partial-1234": a checkpoint being written by process 1234;
// ".step_00000010.deleting-1234": one being removed by a prune.
fs::path work_dir(const fs::path& root, std::int64_t step, std::string_view tag) {
  return root / ("." + checkpoint_dir_name(step) + std::string(tag) + std::to_string(::getpid()));
}

// The step of a canonical "step_<8+ digits>" name; other spellings (step_5, step_000000005)
// are not ours and would make two directories claim one step.
std::optional<std::int64_t> parse_step_name(std::string_view name) {
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kStepPrefix.size());
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc{} || end != digits.data() + digits.size() || step < 0) return std::nullopt;
  if (checkpoint_dir_name(step) != name) return std::nullopt;
  return step;
}

// The pid in a ".step_*.partial-<pid>" or ".step_*.deleting-<pid>" name.
std::optional<pid_t> parse_work_pid(std::string_view name) {
  if (!name.starts_with(".step_")) return std::nullopt;
  for (const std::string_view tag : {kPartialTag, kDeletingTag}) {
    const auto at = name.rfind(tag);
    if (at == std::string_view::npos) continue;
    const std::string_view digits = name.substr(at + tag.size());
    pid_t pid = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (ec == std::errc{} && end == digits.data() + digits.size() && pid > 0) return pid;
  }
  return std::nullopt;
}

// The partial directories this process is writing right now (from any thread), which a prune
// running at the same time must not take for leftovers.
class InProgress {
 public:
  static InProgress& instance() {
    static InProgress registry;
    return registry;
  }
  void add(const fs::path& dir) {
    const std::lock_guard lock(mutex_);
    dirs_.insert(dir.lexically_normal().string());
  }
  void remove(const fs::path& dir) {
    const std::lock_guard lock(mutex_);
    dirs_.erase(dir.lexically_normal().string());
  }
  bool contains(const fs::path& dir) {
    const std::lock_guard lock(mutex_);
    return dirs_.contains(dir.lexically_normal().string());
  }

 private:
  std::mutex mutex_;
  std::set<std::string> dirs_;
};

// Registers a partial directory for its lifetime and removes it unless the checkpoint was
// committed, so a failed write leaves nothing behind.
class PartialDir {
 public:
  explicit PartialDir(fs::path dir) : dir_(std::move(dir)) { InProgress::instance().add(dir_); }
  PartialDir(const PartialDir&) = delete;
  PartialDir& operator=(const PartialDir&) = delete;
  ~PartialDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);  // after a commit: the replaced old checkpoint, if any, or nothing
    InProgress::instance().remove(dir_);
  }
  [[nodiscard]] const fs::path& path() const noexcept { return dir_; }

 private:
  fs::path dir_;
};

bool pid_is_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// A partial or deleting directory nobody will finish: its process has exited, or it is this
// process's own and no thread is writing it.
bool is_stale(const fs::path& dir, pid_t pid) {
  if (pid == ::getpid()) return !InProgress::instance().contains(dir);
  return pid_is_gone(pid);
}

void remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) throw CheckpointError(path, "cannot remove: " + ec.message());
}

// A small file of the checkpoint (COMPLETE, state.json), never waiting on a FIFO put in its place.
std::string read_text(const fs::path& file) {
  try {
    return read_regular_file(file);
  } catch (const FileReadError& e) {
    throw CheckpointError(file, e.what());
  }
}

std::uint64_t size_of(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) throw CheckpointError(file, "cannot get the size: " + ec.message());
  return size;
}

// Moves the finished partial directory to its final name. An existing checkpoint of the same
// step is swapped out in one atomic exchange, so the name always points at a whole checkpoint;
// the old one ends up under the partial name, which the caller removes.
void publish(const fs::path& partial, const fs::path& final_dir) {
  if (::rename(partial.c_str(), final_dir.c_str()) == 0) return;
  const int error = errno;
  if (error != EEXIST && error != ENOTEMPTY && error != EISDIR && error != ENOTDIR)
    throw CheckpointError(final_dir, "cannot rename " + partial.string() + " to it: " + errno_text(error));
  if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) return;
  const int exchange_error = errno;
  if (exchange_error != EINVAL && exchange_error != ENOSYS)
    throw CheckpointError(final_dir, "cannot exchange it with " + partial.string() + ": " + errno_text(exchange_error));
  // The filesystem cannot exchange: move the old one aside first. A crash between the two
  // renames leaves the old checkpoint under a ".deleting" name and the new one under ".partial".
  const fs::path aside = final_dir.parent_path() / ("." + final_dir.filename().string() + std::string(kDeletingTag) +
                                                    std::to_string(::getpid()));
  if (::rename(final_dir.c_str(), aside.c_str()) != 0)
    throw CheckpointError(final_dir, "cannot move it aside to replace it: " + errno_text(errno));
  if (::rename(partial.c_str(), final_dir.c_str()) != 0) {
    const int publish_error = errno;
    ::rename(aside.c_str(), final_dir.c_str());  // put the old one back
    throw CheckpointError(final_dir, "cannot rename " + partial.string() + " to it: " + errno_text(publish_error));
  }
  ::rename(aside.c_str(), partial.c_str());  // so the caller's cleanup removes it
}

// Moves the finished partial directory to dir, which must not exist: an existing one (even one
// created meanwhile) is never replaced.
void publish_new(const fs::path& partial, const fs::path& dir) {
  if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE) == 0) return;
  const int error = errno;
  if (error == EEXIST || error == ENOTEMPTY) throw CheckpointError(dir, kExistsProblem);
  if (error != EINVAL && error != ENOSYS)
    throw CheckpointError(dir, "cannot rename " + partial.string() + " to it: " + errno_text(error));
  // The filesystem cannot refuse a replacement itself: claim the name with an exclusive mkdir, then
  // rename over that directory of our own, which is empty (rename replaces nothing else).
  if (::mkdir(dir.c_str(), 0777) != 0) {
    const int mkdir_error = errno;
    throw CheckpointError(dir, mkdir_error == EEXIST ? std::string(kExistsProblem)
                                                     : "cannot create: " + errno_text(mkdir_error));
  }
  if (::rename(partial.c_str(), dir.c_str()) != 0) {
    const int rename_error = errno;
    ::rmdir(dir.c_str());
    throw CheckpointError(dir, "cannot rename " + partial.string() + " to it: " + errno_text(rename_error));
  }
}

// Creates dir and its missing parents; when it was created, its parent is fsynced so that its own
// entry is durable too.
void create_directory_durably(const fs::path& dir, const std::string& what) {
  std::error_code ec;
  const bool created = fs::create_directories(dir, ec);
  if (ec) throw CheckpointError(dir, what + ": " + ec.message());
  if (created) {
    const fs::path parent = (dir.has_filename() ? dir : dir.parent_path()).parent_path();
    fsync_directory(parent.empty() ? fs::path(".") : parent);
  }
}

// A checkpoint's two safetensors files, validated when constructed (std::invalid_argument for
// invalid tensors), so a refusal happens before anything touches the disk.
class CheckpointFiles {
 public:
  CheckpointFiles(std::int64_t step, std::span<const TensorData> model_tensors,
                  std::span<const TensorData> optimizer_tensors, const std::map<std::string, std::string>& metadata) {
    for (const auto& t : model_tensors) model_.add(t);
    for (const auto& t : optimizer_tensors) optimizer_.add(t);
    const std::string step_text = std::to_string(step);
    for (auto* file : {&model_, &optimizer_}) {
      for (const auto& [key, value] : metadata) file->set_metadata(key, value);
      file->set_metadata("plexus.step", step_text);
    }
  }

  // Creates the directory `into` (removing what an earlier process of the same pid left there) and
  // writes the files, state.json and the COMPLETE marker last, after everything else is durable.
  void write_into(const fs::path& into, std::int64_t step, const boost::json::value& state) const {
    remove_tree(into);
    std::error_code ec;
    if (!fs::create_directory(into, ec) || ec)
      throw CheckpointError(into, "cannot create: " + (ec ? ec.message() : std::string("already exists")));
    model_.write(into / kModelFile);
    optimizer_.write(into / kOptimizerFile);
    write_file_atomically(into / kStateFile, plexus::json_text(state) + "\n");
    // write_file_atomically fsyncs each file and the directory; the marker records the sizes so
    // later damage is detected on load.
    boost::json::object files;
    for (const char* name : {kModelFile, kOptimizerFile, kStateFile}) files[name] = size_of(into / name);
    // The tensor counts too, checked against the files' headers when the checkpoint is verified.
    const boost::json::object tensors{{kModelFile, model_.tensor_count()},
                                      {kOptimizerFile, optimizer_.tensor_count()}};
    const boost::json::object marker{
        {"format", "plexus-checkpoint-1"}, {"step", step}, {"files", std::move(files)}, {"tensors", tensors}};
    write_file_atomically(into / kCompleteMarker, boost::json::serialize(marker) + "\n");
  }

 private:
  SafetensorsWriter model_;
  SafetensorsWriter optimizer_;
};

// Writes the files into the partial directory; a failure (a full disk, the file-size limit) is
// reported for the checkpoint it was to become, saying that nothing replaced what was there: the
// partial directory is removed, so naming only it would point at a file that no longer exists.
void write_or_explain(const CheckpointFiles& files, const fs::path& partial, const fs::path& final_dir,
                      std::int64_t step, const boost::json::value& state) {
  try {
    files.write_into(partial, step, state);
  } catch (const CheckpointError& e) {
    std::string file = e.file();
    if (const std::string from = partial.string(); file.starts_with(from))
      file = final_dir.string() + file.substr(from.size());
    throw CheckpointError(file, e.problem() + "; the checkpoint of step " + std::to_string(step) +
                                    " was not written (its partial directory " + partial.string() +
                                    " is removed) and the checkpoints already there are untouched");
  }
}

}  // namespace

std::string checkpoint_dir_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

void run_checkpoint_fills(std::span<const TensorData> model_tensors, std::span<const TensorData> optimizer_tensors) {
  for (const auto tensors : {model_tensors, optimizer_tensors}) {
    SafetensorsWriter file;
    for (const auto& t : tensors) file.add(t);
    file.write_to([](std::span<const std::byte>) {}, [](std::uint64_t, std::span<const std::byte>) {});
  }
}

fs::path write_checkpoint(const fs::path& root, std::int64_t step, std::span<const TensorData> model_tensors,
                          std::span<const TensorData> optimizer_tensors, const boost::json::value& state,
                          const std::map<std::string, std::string>& metadata) {
  if (step < 0) throw std::invalid_argument("checkpoint step must be >= 0, got " + std::to_string(step));
  // Everything that can be refused without touching the disk is refused first.
  const CheckpointFiles files(step, model_tensors, optimizer_tensors, metadata);
  create_directory_durably(root, "cannot create the checkpoint root");
  const PartialDir partial(work_dir(root, step, kPartialTag));
  const fs::path final_dir = root / checkpoint_dir_name(step);
  write_or_explain(files, partial.path(), final_dir, step, state);
  publish(partial.path(), final_dir);
  fsync_directory(root);
  return final_dir;
}

fs::path create_checkpoint(const fs::path& dir, std::int64_t step, std::span<const TensorData> model_tensors,
                           std::span<const TensorData> optimizer_tensors, const boost::json::value& state,
                           const std::map<std::string, std::string>& metadata) {
  if (step < 0) throw std::invalid_argument("checkpoint step must be >= 0, got " + std::to_string(step));
  const fs::path target = dir.has_filename() ? dir : dir.parent_path();  // "out/new/" names new
  const std::string name = target.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw std::invalid_argument("create_checkpoint: '" + dir.string() + "' does not name a new directory");
  if (const auto named = parse_step_name(name); named && *named != step)
    throw std::invalid_argument(target.string() + ": a directory named " + name + " holds the checkpoint of step " +
                                std::to_string(*named) + ", not of step " + std::to_string(step));
  const CheckpointFiles files(step, model_tensors, optimizer_tensors, metadata);
  std::error_code ec;
  if (const auto type = fs::symlink_status(target, ec).type(); type != fs::file_type::not_found)
    throw CheckpointError(target, ec ? "cannot inspect: " + ec.message() : std::string(kExistsProblem));
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  create_directory_durably(parent, "cannot create the directory");
  const PartialDir partial(parent / ("." + name + std::string(kPartialTag) + std::to_string(::getpid())));
  write_or_explain(files, partial.path(), target, step, state);
  publish_new(partial.path(), target);
  fsync_directory(parent);
  return target;
}

CheckpointScan scan_checkpoints(const fs::path& root) {
  CheckpointScan scan;
  std::error_code ec;
  const auto status = fs::status(root, ec);
  if (status.type() == fs::file_type::not_found) return scan;
  if (ec) throw CheckpointError(root, "cannot inspect the checkpoint root: " + ec.message());
  if (status.type() != fs::file_type::directory) throw CheckpointError(root, "the checkpoint root is not a directory");

  fs::directory_iterator it(root, ec);
  if (ec) throw CheckpointError(root, "cannot list the checkpoint root: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path& path = it->path();
    const std::string name = path.filename().string();
    const bool is_dir = it->is_directory(ec);
    if (const auto step = parse_step_name(name); step && is_dir) {
      if (fs::is_regular_file(path / kCompleteMarker, ec))
        scan.complete.push_back({*step, path});
      else
        scan.skipped.push_back({path, "no COMPLETE marker: incomplete or damaged checkpoint"});
    } else if (name.starts_with(".step_") && name.find(kPartialTag) != std::string::npos) {
      scan.skipped.push_back({path, "partial checkpoint (being written, or left by a run that stopped)"});
    } else if (name.starts_with(".step_") && name.find(kDeletingTag) != std::string::npos) {
      scan.skipped.push_back({path, "checkpoint being removed (or left by a prune that stopped)"});
    } else {
      scan.skipped.push_back({path, "not a checkpoint directory"});
    }
  }
  if (ec) throw CheckpointError(root, "cannot list the checkpoint root: " + ec.message());
  std::sort(scan.complete.begin(), scan.complete.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  std::sort(scan.skipped.begin(), scan.skipped.end(),
            [](const SkippedEntry& a, const SkippedEntry& b) { return a.path < b.path; });
  return scan;
}

std::vector<CheckpointInfo> list_checkpoints(const fs::path& root) {
  CheckpointScan scan = scan_checkpoints(root);
  if (Logger::global().enabled(LogLevel::debug))
    for (const auto& s : scan.skipped)
      Logger::global().log(LogLevel::debug, "checkpoint", "skipping " + s.path.string() + ": " + s.reason);
  return std::move(scan.complete);
}

std::optional<CheckpointInfo> latest_checkpoint(const fs::path& root) {
  auto all = list_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::vector<fs::path> prune_checkpoints(const fs::path& root, std::int64_t keep_last_k) {
  if (keep_last_k < 1)
    throw std::invalid_argument("prune_checkpoints: keep_last_k must be >= 1 (the newest checkpoint is never removed), got " +
                                std::to_string(keep_last_k));
  const CheckpointScan scan = scan_checkpoints(root);
  std::vector<fs::path> removed;
  const auto keep = static_cast<std::size_t>(keep_last_k);
  const std::size_t old = scan.complete.size() > keep ? scan.complete.size() - keep : 0;
  for (std::size_t i = 0; i < old; ++i) {
    const auto& c = scan.complete[i];
    // Renamed first, so a prune stopped halfway never leaves a step_* directory that lists as
    // complete but has lost files.
    const fs::path doomed = work_dir(root, c.step, kDeletingTag);
    if (::rename(c.dir.c_str(), doomed.c_str()) != 0)
      throw CheckpointError(c.dir, "cannot move aside to remove it: " + errno_text(errno));
    remove_tree(doomed);
    removed.push_back(c.dir);
  }
  for (const auto& s : scan.skipped) {
    const auto pid = parse_work_pid(s.path.filename().string());
    if (!pid || !is_stale(s.path, *pid)) continue;
    remove_tree(s.path);
    removed.push_back(s.path);
  }
  if (!removed.empty()) fsync_directory(root);
  return removed;
}

bool CheckpointCheck::ok() const noexcept {
  return consistency.empty() &&
         std::all_of(files.begin(), files.end(), [](const FileCheck& f) { return f.problems.empty(); });
}

std::vector<std::string> CheckpointCheck::problems() const {
  std::vector<std::string> all;
  for (const FileCheck& f : files)
    for (const std::string& p : f.problems) all.push_back(f.file.string() + ": " + p);
  all.insert(all.end(), consistency.begin(), consistency.end());
  return all;
}

CheckpointCheck verify_checkpoint(const LoadedCheckpoint& loaded) {
  CheckpointCheck check;
  const std::string marker = (loaded.dir / kCompleteMarker).string();
  const std::string step_text = std::to_string(loaded.step);
  for (const SafetensorsFile* file : {&loaded.model, &loaded.optimizer}) {
    try {
      check.files.push_back(verify_file(*file));
    } catch (const CheckpointError& e) {  // an unreadable checksum entry: the whole file is suspect
      FileCheck f;
      f.file = file->path();
      f.problems.push_back(e.problem());
      check.files.push_back(std::move(f));
    }
    // The step the writer recorded in the file's metadata.
    if (const auto step = file->metadata().find("plexus.step");
        step != file->metadata().end() && step->second != step_text)
      check.consistency.push_back(file->path().string() + ": its metadata records step " + step->second +
                                  ", but " + marker + " records step " + step_text +
                                  ": the file is of another checkpoint than the rest of the directory");
    const std::string name = file->path().filename().string();
    if (const auto count = loaded.recorded_tensor_counts.find(name);
        count != loaded.recorded_tensor_counts.end() && count->second != file->size())
      check.consistency.push_back(file->path().string() + ": " + std::to_string(file->size()) +
                                  " tensors, but " + marker + " records " + std::to_string(count->second) +
                                  ": tensors were added or removed after the checkpoint was written");
  }
  // state.json's own step, which the trainer continues from, must be the step of the tensors.
  if (const boost::json::object* state = loaded.state.if_object())
    if (const boost::json::value* step = state->if_contains("step"))
      if (!step->is_int64() || step->get_int64() != loaded.step)
        check.consistency.push_back((loaded.dir / kStateFile).string() + ": records step " +
                                    boost::json::serialize(*step) + ", but the tensors are of step " +
                                    step_text + " (" + marker +
                                    " and the files' metadata): state.json is of another checkpoint");
  return check;
}

LoadedCheckpoint load_checkpoint(const fs::path& dir, ReadMode mode, Verify verify) {
  std::error_code ec;
  const auto status = fs::status(dir, ec);
  if (status.type() == fs::file_type::not_found) throw CheckpointError(dir, "checkpoint directory does not exist");
  if (ec) throw CheckpointError(dir, "cannot inspect: " + ec.message());
  if (status.type() != fs::file_type::directory) throw CheckpointError(dir, "not a directory");

  const fs::path marker_path = dir / kCompleteMarker;
  if (!fs::is_regular_file(marker_path, ec))
    throw CheckpointError(dir, "incomplete checkpoint (no COMPLETE marker): it was being written when the run stopped");

  const std::string marker_text = read_text(marker_path);
  boost::json::value marker = boost::json::parse(marker_text, ec);
  const boost::json::object* fields = marker.if_object();
  const boost::json::value* step = fields ? fields->if_contains("step") : nullptr;
  const boost::json::value* files = fields ? fields->if_contains("files") : nullptr;
  if (ec || !step || !step->is_int64() || step->get_int64() < 0 || !files || !files->is_object())
    throw CheckpointError(marker_path, "not a valid completion marker (expected JSON with \"step\" and \"files\"): "
                                      "the checkpoint was damaged after it was written");

  const fs::path named = dir.has_filename() ? dir : dir.parent_path();  // "root/step_1/" names step_1
  if (const auto named_step = parse_step_name(named.filename().string()); named_step && *named_step != step->get_int64())
    throw CheckpointError(marker_path, "records step " + std::to_string(step->get_int64()) + " but the directory is " +
                                           named.filename().string());

  for (const char* name : {kModelFile, kOptimizerFile, kStateFile}) {
    const fs::path file = dir / name;
    if (!fs::exists(file, ec)) throw CheckpointError(file, "missing from the checkpoint");
    const boost::json::value* recorded = files->get_object().if_contains(name);
    const auto recorded_size = recorded && recorded->is_int64() && recorded->get_int64() >= 0
                                   ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(recorded->get_int64()))
                               : recorded && recorded->is_uint64() ? std::optional<std::uint64_t>(recorded->get_uint64())
                                                                    : std::nullopt;
    if (!recorded_size)
      throw CheckpointError(marker_path, std::string("records no size for ") + name +
                                             ": the checkpoint was damaged after it was written");
    if (const std::uint64_t size = size_of(file); size != *recorded_size)
      throw CheckpointError(file, std::to_string(size) + " bytes, but the COMPLETE marker recorded " +
                                      std::to_string(*recorded_size) +
                                      ": the file changed after the checkpoint was written");
  }

  SafetensorsFile model = SafetensorsFile::open(dir / kModelFile, mode);
  SafetensorsFile optimizer = SafetensorsFile::open(dir / kOptimizerFile, mode);
  const fs::path state_path = dir / kStateFile;
  boost::json::value state = boost::json::parse(read_text(state_path), ec);
  if (ec) throw CheckpointError(state_path, "not valid JSON: " + ec.message());
  std::map<std::string, std::uint64_t> counts;
  if (const boost::json::value* tensors = fields->if_contains("tensors");
      tensors != nullptr && tensors->is_object())
    for (const auto& [name, count] : tensors->get_object())
      if (count.is_int64() && count.get_int64() >= 0)
        counts[std::string(name)] = static_cast<std::uint64_t>(count.get_int64());
  LoadedCheckpoint loaded{
      dir, step->get_int64(), std::move(model), std::move(optimizer), std::move(state), std::move(counts)};
  if (verify == Verify::structure) return loaded;

  const CheckpointCheck check = verify_checkpoint(loaded);
  if (!check.ok()) {
    const std::vector<std::string> problems = check.problems();
    std::string message = "failed verification (" + std::to_string(problems.size()) +
                          (problems.size() == 1 ? " problem" : " problems") +
                          "); nothing of it was loaded (plexus checkpoint inspect --verify lists them all):";
    for (const std::string& p : problems) message += "\n  " + p;
    throw CheckpointError(dir, message);
  }
  for (const FileCheck& f : check.files)
    if (!f.has_checksums)
      log_info("checkpoint",
               f.file.string() +
                   " records no checksums (written before Plexus recorded them): its values were "
                   "checked, its bytes cannot be");
  return loaded;
}

std::vector<std::string> tensor_mismatches(const SafetensorsFile& loaded, std::span<const ExpectedTensor> expected) {
  std::set<std::string_view> names;
  for (const auto& e : expected)
    if (!names.insert(e.name).second)
      throw std::invalid_argument("tensor_mismatches: expected tensor '" + e.name + "' is listed twice");

  std::vector<std::string> problems;
  for (const auto& e : expected) {
    const std::string prefix = "checkpoint tensor " + e.name + ": ";
    if (!loaded.contains(e.name)) {
      problems.push_back(prefix + "missing (expected shape " + shape_text(e.shape) +
                         (e.dtype ? ", " + std::string(to_string(*e.dtype)) : std::string()) + ")");
      continue;
    }
    const TensorInfo& found = loaded.info(e.name);
    std::string differences;
    if (found.shape != e.shape)
      differences = "expected shape " + shape_text(e.shape) + ", found " + shape_text(found.shape);
    if (e.dtype && *e.dtype != found.dtype)
      differences += (differences.empty() ? "" : "; ") + std::string("expected dtype ") +
                     std::string(to_string(*e.dtype)) + ", found " + std::string(to_string(found.dtype));
    if (!differences.empty()) problems.push_back(prefix + differences);
  }
  for (const auto& name : loaded.names()) {
    if (names.contains(name)) continue;
    const TensorInfo& found = loaded.info(name);
    problems.push_back("checkpoint tensor " + name + ": not expected (found shape " + shape_text(found.shape) + ", " +
                       std::string(to_string(found.dtype)) + ")");
  }
  return problems;
}

void expect_tensors_match(const SafetensorsFile& loaded, std::span<const ExpectedTensor> expected) {
  const auto problems = tensor_mismatches(loaded, expected);
  if (problems.empty()) return;
  std::string message = std::to_string(problems.size()) +
                        (problems.size() == 1 ? " tensor does" : " tensors do") + " not match what the model expects:";
  for (const auto& p : problems) message += "\n  " + p;
  throw CheckpointError(loaded.path(), message);
}

}  // namespace plexus::checkpoint
