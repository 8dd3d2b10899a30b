// Opening the files Plexus reads (datasets, tokenizer.json, configs, checkpoints) so that a path
// that is not a regular file is refused with a message instead of hanging the process: open(2) of
// a FIFO for reading blocks until some writer opens it, which may be never, and reading a device
// or a socket has no end either. So the type is checked with stat(2) before anything is opened
// (a device is never opened at all), the file is opened with O_NONBLOCK (a FIFO swapped in after
// the stat still cannot block the open), and checked again with fstat(2) on what was opened.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace plexus {

// A path that cannot be read as a regular file. what() is the problem alone, without the path
// ("no such file", "a FIFO (named pipe), not a regular file: ..."), so that each caller wraps it
// in its own error type (DataError, CheckpointError, ConfigError) naming the file its way.
class FileReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a file of this st_mode is, for messages: "a directory", "a FIFO (named pipe)", ...
[[nodiscard]] std::string file_type_text(mode_t mode);

// A regular file open for reading; the descriptor is closed on destruction.
class RegularFile {
 public:
  // Opens file for reading, refusing (FileReadError) anything but a regular file without ever
  // blocking; symbolic links are followed.
  [[nodiscard]] static RegularFile open(const std::filesystem::path& file);

  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  // The whole file (read until its end, so a file that grew since open() is read whole).
  // FileReadError with the errno text on a read error.
  [[nodiscard]] std::string read_all() const;

 private:
  RegularFile(int fd, std::uint64_t size) noexcept : fd_(fd), size_(size) {}
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// RegularFile::open(file).read_all().
[[nodiscard]] std::string read_regular_file(const std::filesystem::path& file);

}  // namespace plexus
