// Writing a file so that a reader (or a run restarted after a crash or power loss) sees either
// the old content or the complete new content, never a mix or a truncated file:
//   1. the bytes go to "<path>.tmp-<pid>-<random>" in the same directory (same filesystem, so
//      the rename below is atomic), created exclusively;
//   2. the temporary file is fsynced, so its data is on disk before its name is;
//   3. it is renamed over <path> (atomic replacement on POSIX);
//   4. the directory is fsynced, so the rename itself survives a power loss.
// On any failure before the rename, the temporary file is removed and <path> is untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "plexus/core/checkpoint/safetensors.hpp"  // CheckpointError

namespace plexus::checkpoint {

// Where a producer writes the bytes of a file being written atomically. Only
// write_file_atomically creates one.
class FileSink {
 public:
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;
  ~FileSink() = default;

  // Appends bytes to the file. Throws CheckpointError naming the target and the errno text
  // (e.g. "No space left on device"; "File too large" past the file-size limit, `ulimit -f`, with
  // the limit: a process that ignores SIGXFSZ, as plexus-train and plexus do, gets EFBIG from
  // write() instead of being killed).
  void write(std::span<const std::byte> bytes);
  void write(std::string_view text);
  // Overwrites bytes already written, at offset from the start of the file (a header completed
  // once the data after it is known). Throws CheckpointError as write() does.
  void write_at(std::uint64_t offset, std::span<const std::byte> bytes);
  [[nodiscard]] std::uint64_t bytes_written() const noexcept { return written_; }

 private:
  friend void write_file_atomically(const std::filesystem::path&, const std::function<void(FileSink&)>&);
  FileSink(int fd, const std::filesystem::path& target) : fd_(fd), target_(target) {}

  int fd_;  // owned by write_file_atomically, which outlives the sink
  const std::filesystem::path& target_;
  std::uint64_t written_ = 0;
};

// Writes target atomically with the bytes produce writes into the sink. Anything produce throws
// (or a failing write, fsync, close or rename) leaves target as it was and no temporary file
// behind, and propagates; system failures are CheckpointErrors naming the path and the errno
// text. The new file has the permissions of the file it replaces, or the usual 0666 & ~umask.
// Precondition: the parent directory exists (it is not created).
void write_file_atomically(const std::filesystem::path& target, const std::function<void(FileSink&)>& produce);
void write_file_atomically(const std::filesystem::path& target, std::span<const std::byte> bytes);
void write_file_atomically(const std::filesystem::path& target, std::string_view text);

// Makes a directory's entries (files created, renamed or removed in it) durable. Throws
// CheckpointError naming the directory.
void fsync_directory(const std::filesystem::path& dir);

}  // namespace plexus::checkpoint
