// RegularFile: stat, open without blocking, fstat; see regular_file.hpp for why.
#include "plexus/core/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

namespace plexus {
namespace {

std::string errno_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

std::string not_regular(mode_t mode) {
  std::string text = file_type_text(mode) + ", not a regular file";
  if (S_ISFIFO(mode)) text += ": reading a pipe would wait for a writer, possibly forever";
  return text;
}

}  // namespace

std::string file_type_text(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISREG(mode)) return "a regular file";
  return "a file of an unknown type";
}

RegularFile RegularFile::open(const std::filesystem::path& file) {
  struct stat before {};
  if (::stat(file.c_str(), &before) != 0) {
    const int error = errno;
    throw FileReadError(error == ENOENT ? std::string("no such file") : "cannot stat: " + errno_text(error));
  }
  if (!S_ISREG(before.st_mode)) throw FileReadError(not_regular(before.st_mode));
  // O_NONBLOCK: should the path have become a FIFO since the stat, the open still returns at once
  // (and the fstat below refuses it). It changes nothing for a regular file.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    throw FileReadError(error == ENOENT ? std::string("no such file") : "cannot open: " + errno_text(error));
  }
  RegularFile opened(fd, 0);
  struct stat after {};
  if (::fstat(fd, &after) != 0) throw FileReadError("cannot stat: " + errno_text(errno));
  if (!S_ISREG(after.st_mode)) throw FileReadError(not_regular(after.st_mode));
  if (const int flags = ::fcntl(fd, F_GETFL); flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  opened.size_ = static_cast<std::uint64_t>(after.st_size);
  return opened;
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(std::exchange(other.size_, 0)) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RegularFile::read_all() const {
  std::string text;
  text.resize(static_cast<std::size_t>(size_));
  std::size_t done = 0;
  for (;;) {
    if (done == text.size()) text.resize(text.size() + 4096);  // a file that grew: read on to its end
    const ssize_t n = ::read(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FileReadError("cannot read: " + errno_text(errno));
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  return text;
}

std::string read_regular_file(const std::filesystem::path& file) {
  return RegularFile::open(file).read_all();
}

}  // namespace plexus
