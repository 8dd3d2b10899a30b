// IndexedDatasetWriter: PREFIX.bin and PREFIX.idx as Megatron's IndexedDatasetBuilder and
// _IndexWriter write them (one sequence per document), through temporary files renamed into
// place by finalize().
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>

#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;

std::filesystem::path temporary_beside(const std::filesystem::path& file) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path path = file;
  path += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  return path;
}

std::string reason(int error) { return error != 0 ? std::strerror(error) : "write failed"; }

template <typename T>
void put(std::vector<char>& out, T value) {
  const auto* bytes = reinterpret_cast<const char*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

template <typename Stored, typename T>
void append_as(std::vector<char>& out, std::span<const T> tokens) {
  const std::size_t at = out.size();
  out.resize(at + tokens.size() * sizeof(Stored));
  char* dst = out.data() + at;
  for (const T token : tokens) {
    const auto value = static_cast<Stored>(token);
    std::memcpy(dst, &value, sizeof(Stored));
    dst += sizeof(Stored);
  }
}

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(std::filesystem::path prefix, TokenDtype dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {
  const std::string bin = bin_path(prefix_).string();
  if (!is_integer_dtype(dtype_))
    throw DataError(bin, "cannot write " + bin + ": dtype " + std::string(dtype_name(dtype_)) +
                             " does not hold token ids (use uint8, uint16, int32 or another integer dtype)");
  bin_tmp_ = temporary_beside(bin_path(prefix_));
  idx_tmp_ = temporary_beside(idx_path(prefix_));
  errno = 0;
  bin_.open(bin_tmp_, std::ios::binary | std::ios::trunc);
  if (!bin_) {
    const int error = errno;
    const auto dir = prefix_.parent_path().empty() ? std::filesystem::path(".") : prefix_.parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      throw DataError(bin, "cannot write " + bin + ": directory " + dir.string() + " does not exist");
    throw DataError(bin, "cannot write " + bin + " (temporary file " + bin_tmp_.string() + "): " + reason(error));
  }
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finalized_) discard();
}

void IndexedDatasetWriter::discard() noexcept {
  if (bin_.is_open()) bin_.close();
  std::error_code ec;
  std::filesystem::remove(bin_tmp_, ec);
  std::filesystem::remove(idx_tmp_, ec);
}

uint64_t IndexedDatasetWriter::idx_bytes() const noexcept {
  const uint64_t sequences = lengths_.size();
  return 34 + sequences * (sizeof(int32_t) + sizeof(int64_t)) + (sequences + 1) * sizeof(int64_t);
}

void IndexedDatasetWriter::add_document(std::span<const int64_t> tokens) { add(tokens); }
void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) { add(tokens); }

template <typename T>
void IndexedDatasetWriter::add(std::span<const T> tokens) {
  const std::string bin = bin_path(prefix_).string();
  if (finalized_) throw DataError(bin, "cannot add a document to " + bin + ": the writer was already finalized");
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<int32_t>::max()))
    throw DataError(bin, "cannot write " + bin + ": document " + std::to_string(lengths_.size()) + " has " +
                             std::to_string(tokens.size()) + " tokens; the .idx format stores lengths as int32");
  const int64_t lo = dtype_min(dtype_), hi = dtype_max(dtype_);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto token = static_cast<int64_t>(tokens[i]);
    if (token < lo || token > hi)
      throw DataError(bin, "cannot write " + bin + ": token " + std::to_string(token) + " (document " +
                               std::to_string(lengths_.size()) + ", position " + std::to_string(i) +
                               ") does not fit dtype " + std::string(dtype_name(dtype_)) + " [" +
                               std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  buffer_.clear();
  switch (dtype_) {
    case TokenDtype::uint8: append_as<uint8_t>(buffer_, tokens); break;
    case TokenDtype::int8: append_as<int8_t>(buffer_, tokens); break;
    case TokenDtype::int16: append_as<int16_t>(buffer_, tokens); break;
    case TokenDtype::uint16: append_as<uint16_t>(buffer_, tokens); break;
    case TokenDtype::int32: append_as<int32_t>(buffer_, tokens); break;
    case TokenDtype::int64: append_as<int64_t>(buffer_, tokens); break;
    default: break;
  }
  errno = 0;
  bin_.write(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  if (!bin_) throw DataError(bin, "cannot write " + bin + " (temporary file " + bin_tmp_.string() + "): " + reason(errno));
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  tokens_ += tokens.size();
}

void IndexedDatasetWriter::finalize() {
  const std::string bin = bin_path(prefix_).string();
  const std::string idx = idx_path(prefix_).string();
  if (finalized_) throw DataError(bin, "cannot finalize " + bin + " twice");
  errno = 0;
  bin_.close();
  if (!bin_) throw DataError(bin, "cannot write " + bin + " (temporary file " + bin_tmp_.string() + "): " + reason(errno));

  // The header and the three arrays of _IndexWriter.write: int32 lengths, int64 byte
  // pointers (the running sum of length * itemsize), int64 document indices (0, 1, .., S:
  // one sequence per document).
  std::vector<char> index;
  index.reserve(static_cast<std::size_t>(idx_bytes()));
  index.insert(index.end(), kMagic, kMagic + sizeof(kMagic));
  put<uint64_t>(index, kVersion);
  put<uint8_t>(index, static_cast<uint8_t>(dtype_));
  put<uint64_t>(index, lengths_.size());
  put<uint64_t>(index, lengths_.size() + 1);
  for (const int32_t length : lengths_) put<int32_t>(index, length);
  int64_t pointer = 0;
  const auto itemsize = static_cast<int64_t>(dtype_size(dtype_));
  for (const int32_t length : lengths_) {
    put<int64_t>(index, pointer);
    pointer += int64_t{length} * itemsize;
  }
  for (std::size_t i = 0; i <= lengths_.size(); ++i) put<int64_t>(index, static_cast<int64_t>(i));

  {
    errno = 0;
    std::ofstream out(idx_tmp_, std::ios::binary | std::ios::trunc);
    if (out) out.write(index.data(), static_cast<std::streamsize>(index.size()));
    if (out) out.close();
    if (!out) {
      const int error = errno;
      discard();
      throw DataError(idx, "cannot write " + idx + " (temporary file " + idx_tmp_.string() + "): " + reason(error));
    }
  }

  std::error_code ec;
  std::filesystem::rename(bin_tmp_, bin_path(prefix_), ec);
  if (ec) {
    discard();
    throw DataError(bin, "cannot rename " + bin_tmp_.string() + " to " + bin + ": " + ec.message());
  }
  std::filesystem::rename(idx_tmp_, idx_path(prefix_), ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(bin_path(prefix_), ignored);  // no .bin without its .idx
    discard();
    throw DataError(idx, "cannot rename " + idx_tmp_.string() + " to " + idx + ": " + ec.message());
  }
  finalized_ = true;
}

}  // namespace plexus::data
