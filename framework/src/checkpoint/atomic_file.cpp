// Atomic file replacement: temporary file, fsync, rename, fsync of the directory.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <random>
#include <system_error>
#include <utility>

#include "plexus/core/checkpoint/atomic_file.hpp"

namespace plexus::checkpoint {

namespace {

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

// Owns a descriptor; close() reports the error a plain destructor would have to ignore
// (on NFS, for one, a failed write may only show up there).
class Fd {
 public:
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  // 0 or the errno of a failed close; the descriptor is released either way.
  int close() noexcept {
    const int rc = ::close(std::exchange(fd_, -1));
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

// Removes the temporary file unless the rename consumed it.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::filesystem::path path) : path_(std::move(path)) {}
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  ~TempFileGuard() {
    if (armed_) ::unlink(path_.c_str());
  }
  void release() noexcept { armed_ = false; }

 private:
  std::filesystem::path path_;
  bool armed_ = true;
};

std::string random_suffix() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(engine()));
  return text;
}

// Creates "<target>.tmp-<pid>-<random>" exclusively (a name collision, however unlikely, must
// not make two writers share a file).
std::pair<std::filesystem::path, int> create_temp(const std::filesystem::path& target) {
  int error = 0;
  std::filesystem::path temp;
  for (int attempt = 0; attempt < 16; ++attempt) {
    temp = target;
    temp += ".tmp-" + std::to_string(::getpid()) + "-" + random_suffix();
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return {temp, fd};
    error = errno;
    if (error != EEXIST) break;
  }
  throw CheckpointError(target, "cannot create the temporary file " + temp.string() + ": " + errno_text(error));
}

// Why a write failed, for the message. EFBIG is the file-size limit (RLIMIT_FSIZE, `ulimit -f`) in
// all likelihood: it is named with its value, or the user would look for a full disk.
std::string write_problem(int error, std::uint64_t at) {
  std::string text = "cannot write: " + errno_text(error);
  if (error == EFBIG) {
    text += " at byte " + std::to_string(at);
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
      text +=
          ": the file-size limit of this process (ulimit -f) is " + std::to_string(limit.rlim_cur) + " bytes";
  }
  return text;
}

}  // namespace

void FileSink::write(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw CheckpointError(target_, write_problem(errno, written_));
    bytes = bytes.subspan(static_cast<std::size_t>(n));
    written_ += static_cast<std::uint64_t>(n);
  }
}

void FileSink::write_at(std::uint64_t offset, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw CheckpointError(target_, write_problem(errno, offset));
    bytes = bytes.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
}

void FileSink::write(std::string_view text) { write(std::as_bytes(std::span<const char>(text.data(), text.size()))); }

void write_file_atomically(const std::filesystem::path& target, const std::function<void(FileSink&)>& produce) {
  if (target.filename().empty()) throw CheckpointError(target, "cannot write: the path names no file");
  auto [temp, raw_fd] = create_temp(target);
  TempFileGuard guard(temp);
  Fd fd(raw_fd);

  // A replaced file keeps its permissions (a checkpoint made group-readable stays so).
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::fchmod(fd.get(), st.st_mode & 07777) != 0)
    throw CheckpointError(target, "cannot set the permissions of " + temp.string() + ": " + errno_text(errno));

  FileSink sink(fd.get(), target);
  produce(sink);

  // The data must be on disk before the name points at it, or a power loss could leave the
  // new name on an empty or partial file.
  if (::fsync(fd.get()) != 0) throw CheckpointError(target, "cannot fsync " + temp.string() + ": " + errno_text(errno));
  if (const int error = fd.close(); error != 0)
    throw CheckpointError(target, "cannot close " + temp.string() + ": " + errno_text(error));
  if (::rename(temp.c_str(), target.c_str()) != 0)
    throw CheckpointError(target, "cannot rename " + temp.string() + " over it: " + errno_text(errno));
  guard.release();
  fsync_directory(target.has_parent_path() ? target.parent_path() : std::filesystem::path("."));
}

void write_file_atomically(const std::filesystem::path& target, std::span<const std::byte> bytes) {
  write_file_atomically(target, [bytes](FileSink& sink) { sink.write(bytes); });
}

void write_file_atomically(const std::filesystem::path& target, std::string_view text) {
  write_file_atomically(target, [text](FileSink& sink) { sink.write(text); });
}

void fsync_directory(const std::filesystem::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) throw CheckpointError(dir, "cannot open the directory to fsync it: " + errno_text(errno));
  if (::fsync(fd.get()) != 0) throw CheckpointError(dir, "cannot fsync the directory: " + errno_text(errno));
  if (const int error = fd.close(); error != 0)
    throw CheckpointError(dir, "cannot close the directory: " + errno_text(error));
}

}  // namespace plexus::checkpoint
