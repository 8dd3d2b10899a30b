// MappedFile: a whole file mapped read-only, unmapped on destruction.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {
namespace {

// Closes a descriptor on every path out of the constructor; the mapping outlives it.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& file) : path_(file) {
  const std::string name = file.string();
  Descriptor descriptor;
  descriptor.fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor.fd < 0) {
    const int error = errno;
    if (error == ENOENT) throw DataError(name, name + ": no such file");
    throw DataError(name, name + ": cannot open: " + std::strerror(error));
  }
  struct stat info {};
  if (::fstat(descriptor.fd, &info) != 0) throw DataError(name, name + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) throw DataError(name, name + ": not a regular file");
  size_ = static_cast<std::size_t>(info.st_size);
  if (size_ == 0) return;  // mmap refuses length 0; an empty file is an empty span
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, descriptor.fd, 0);
  if (mapped == MAP_FAILED) {
    const int error = errno;
    size_ = 0;
    throw DataError(name, name + ": cannot memory-map: " + std::strerror(error));
  }
  data_ = static_cast<const std::byte*>(mapped);
}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace plexus::data
