// MappedFile: a whole file mapped read-only, unmapped on destruction.
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/core/regular_file.hpp"

namespace plexus::data {

MappedFile::MappedFile(const std::filesystem::path& file) : path_(file) {
  const std::string name = file.string();
  // Never blocks: a FIFO (or a device) given as a .bin or .idx is refused, not waited on.
  std::optional<RegularFile> opened;
  try {
    opened.emplace(RegularFile::open(file));
  } catch (const FileReadError& e) {
    throw DataError(name, name + ": " + e.what());
  }
  const int fd = opened->fd();
  size_ = static_cast<std::size_t>(opened->size());
  if (size_ == 0) return;  // mmap refuses length 0; an empty file is an empty span
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
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
