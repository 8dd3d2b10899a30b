// IndexedDataset: opens PREFIX.idx / PREFIX.bin the way Megatron's _IndexReader and
// _MMapBinReader do (both memory-mapped; the .idx arrays read in place at their unaligned
// offsets), and checks everything up front so no later access can run off the mapping.
#include <algorithm>
#include <cstring>
#include <limits>

#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {
namespace {

constexpr unsigned char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr std::size_t kHeaderSize = 34;  // magic 9 + version 8 + dtype 1 + counts 8 + 8

template <typename T>
T load(const std::byte* at) noexcept {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

// a * b + c without wrapping, or nullopt.
std::optional<uint64_t> mul_add(uint64_t a, uint64_t b, uint64_t c) {
  if (b != 0 && a > (std::numeric_limits<uint64_t>::max() - c) / b) return std::nullopt;
  return a * b + c;
}

}  // namespace

IndexedDataset::IndexedDataset(std::filesystem::path prefix) : prefix_(std::move(prefix)) {
  const auto idx = idx_path(prefix_), bin = bin_path(prefix_);
  // Name both missing files in one message: a wrong prefix is the usual cause.
  std::error_code ec;
  const bool has_idx = std::filesystem::exists(idx, ec), has_bin = std::filesystem::exists(bin, ec);
  if (!has_idx || !has_bin) {
    const std::string missing = !has_idx && !has_bin ? idx.string() + " and " + bin.string()
                                : !has_idx            ? idx.string()
                                                      : bin.string();
    throw DataError(!has_idx ? idx.string() : bin.string(),
                    "indexed dataset " + prefix_.string() + ": no such file: " + missing +
                        " (a dataset is PREFIX.idx plus PREFIX.bin; give the PREFIX)");
  }
  idx_ = MappedFile(idx);
  bin_ = MappedFile(bin);
  validate();
}

int64_t IndexedDataset::read_i64(std::size_t offset) const noexcept { return load<int64_t>(idx_.bytes().data() + offset); }
int32_t IndexedDataset::read_i32(std::size_t offset) const noexcept { return load<int32_t>(idx_.bytes().data() + offset); }

void IndexedDataset::validate() {
  const std::string idx = idx_.path().string(), bin = bin_.path().string();
  const auto fail = [&](const std::string& file, const std::string& message) { throw DataError(file, file + ": " + message); };
  const std::byte* data = idx_.bytes().data();
  const std::size_t size = idx_.size();

  // Header: magic, version, dtype code, counts.
  const std::size_t magic_bytes = std::min<std::size_t>(size, sizeof(kMagic));
  if (magic_bytes == 0 || std::memcmp(data, kMagic, magic_bytes) != 0)
    fail(idx, "not a Megatron indexed dataset (.idx magic): the file must start with \"MMIDIDX\\x00\\x00\"");
  if (size < kHeaderSize)
    fail(idx, "truncated .idx: " + std::to_string(size) + " bytes, shorter than the " + std::to_string(kHeaderSize) +
                  "-byte header");
  const auto version = load<uint64_t>(data + 9);
  if (version != 1)
    fail(idx, "unsupported .idx version " + std::to_string(version) + " (Megatron's format, read here, is version 1)");
  const auto code = load<uint8_t>(data + 17);
  const auto dtype = dtype_from_code(code);
  if (!dtype)
    fail(idx, "unknown dtype code " + std::to_string(code) +
                  " (known: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)");
  if (!is_integer_dtype(*dtype))
    fail(idx, "dtype " + std::string(dtype_name(*dtype)) + " (code " + std::to_string(code) +
                  ") holds no token ids; Plexus reads integer token datasets only");
  dtype_ = *dtype;
  const auto sequences = load<uint64_t>(data + 18);
  const auto document_indices = load<uint64_t>(data + 26);

  // Sizes: the arrays must fill the file exactly (plus one int8 mode per sequence for
  // Megatron's multimodal datasets).
  const auto arrays = mul_add(sequences, 12, kHeaderSize);
  const auto expected = arrays ? mul_add(document_indices, 8, *arrays) : std::nullopt;
  const std::string counts = "the header declares " + std::to_string(sequences) + " sequences and " +
                             std::to_string(document_indices) + " document indices";
  if (!expected || *expected > size)
    fail(idx, "truncated .idx: " + counts + ", which need " + (expected ? std::to_string(*expected) : "more than 2^64") +
                  " bytes, but the file has " + std::to_string(size));
  if (size != *expected) {
    if (size - *expected == sequences && sequences != 0) {
      multimodal_ = true;
    } else {
      fail(idx, "size mismatch: " + counts + ", which need " + std::to_string(*expected) + " bytes, but the file has " +
                    std::to_string(size) + " (" + std::to_string(size - *expected) + " unexpected trailing bytes)");
    }
  }
  sequence_count_ = static_cast<std::size_t>(sequences);
  document_index_count_ = static_cast<std::size_t>(document_indices);
  lengths_at_ = kHeaderSize;
  pointers_at_ = lengths_at_ + 4 * sequence_count_;
  documents_at_ = pointers_at_ + 8 * sequence_count_;

  // Document indices: 0, non-decreasing, ending at the sequence count (Megatron asserts
  // sequence_lengths.shape[0] == document_indices[-1]).
  if (document_index_count_ == 0) fail(idx, "the document index list is empty (it must start with 0)");
  if (read_i64(documents_at_) != 0)
    fail(idx, "the document index list starts with " + std::to_string(read_i64(documents_at_)) + ", not 0");
  for (std::size_t i = 1; i < document_index_count_; ++i) {
    const int64_t previous = read_i64(documents_at_ + 8 * (i - 1)), current = read_i64(documents_at_ + 8 * i);
    if (current < previous || static_cast<uint64_t>(current) > sequences)
      fail(idx, "document index " + std::to_string(i) + " is " + std::to_string(current) +
                    ": document indices must not decrease and must stay within the " + std::to_string(sequences) +
                    " sequences");
  }
  const int64_t last = read_i64(documents_at_ + 8 * (document_index_count_ - 1));
  if (static_cast<uint64_t>(last) != sequences)
    fail(idx, "the last document index is " + std::to_string(last) + " but there are " + std::to_string(sequences) +
                  " sequences (they must match)");

  // Lengths, then the .bin's size against their total.
  const uint64_t itemsize = dtype_size(dtype_);
  uint64_t total = 0;
  for (std::size_t i = 0; i < sequence_count_; ++i) {
    const int32_t length = read_i32(lengths_at_ + 4 * i);
    if (length < 0) fail(idx, "sequence " + std::to_string(i) + " has a negative length (" + std::to_string(length) + ")");
    total += static_cast<uint64_t>(length);  // < 2^31 * 2^61: cannot wrap
  }
  const auto bin_expected = mul_add(total, itemsize, 0);
  if (!bin_expected || *bin_expected != bin_.size())
    fail(bin, ".bin size mismatch: " + idx + " describes " + std::to_string(total) + " " + std::string(dtype_name(dtype_)) +
                  " tokens (" + (bin_expected ? std::to_string(*bin_expected) : "more than 2^64") +
                  " bytes) but the file has " + std::to_string(bin_.size()) + " bytes");
  token_count_ = total;

  // Pointers: inside the .bin and contiguous from 0, as Megatron's writer lays them out
  // (and as its contiguous-slice reads assume).
  uint64_t next = 0;
  for (std::size_t i = 0; i < sequence_count_; ++i) {
    const int64_t pointer = read_i64(pointers_at_ + 8 * i);
    const auto length = static_cast<uint64_t>(read_i32(lengths_at_ + 4 * i));
    const uint64_t bytes = length * itemsize;
    if (pointer < 0 || static_cast<uint64_t>(pointer) > bin_.size() || bytes > bin_.size() - static_cast<uint64_t>(pointer))
      fail(idx, "sequence " + std::to_string(i) + "'s pointer " + std::to_string(pointer) + " (+" + std::to_string(bytes) +
                    " bytes) is out of bounds of " + bin + " (" + std::to_string(bin_.size()) + " bytes)");
    if (static_cast<uint64_t>(pointer) != next)
      fail(idx, "sequence " + std::to_string(i) + "'s pointer is " + std::to_string(pointer) + ", expected " +
                    std::to_string(next) + " (sequences must be stored back to back from the start of the .bin)");
    next += bytes;
  }
}

uint32_t IndexedDataset::sequence_length(std::size_t sequence) const {
  if (sequence >= sequence_count_)
    throw std::out_of_range("sequence " + std::to_string(sequence) + " of " + prefix_.string() + " (it has " +
                            std::to_string(sequence_count_) + ")");
  return static_cast<uint32_t>(read_i32(lengths_at_ + 4 * sequence));
}

uint64_t IndexedDataset::sequence_pointer(std::size_t sequence) const {
  sequence_length(sequence);  // range check
  return static_cast<uint64_t>(read_i64(pointers_at_ + 8 * sequence));
}

uint64_t IndexedDataset::sequence_offset(std::size_t sequence) const {
  return sequence_pointer(sequence) / dtype_size(dtype_);
}

uint64_t IndexedDataset::document_index(std::size_t i) const {
  if (i >= document_index_count_)
    throw std::out_of_range("document index " + std::to_string(i) + " of " + prefix_.string() + " (it has " +
                            std::to_string(document_index_count_) + ")");
  return static_cast<uint64_t>(read_i64(documents_at_ + 8 * i));
}

TokenView IndexedDataset::tokens() const noexcept {
  return {bin_.bytes().data(), static_cast<std::size_t>(token_count_), dtype_};
}

TokenView IndexedDataset::sequence(std::size_t sequence) const {
  const uint32_t length = sequence_length(sequence);
  return tokens().subview(static_cast<std::size_t>(sequence_offset(sequence)), length);
}

TokenView IndexedDataset::document(std::size_t document) const {
  if (document >= document_count())
    throw std::out_of_range("document " + std::to_string(document) + " of " + prefix_.string() + " (it has " +
                            std::to_string(document_count()) + ")");
  const auto first = static_cast<std::size_t>(document_index(document));
  const auto end = static_cast<std::size_t>(document_index(document + 1));
  const uint64_t begin = first < sequence_count_ ? sequence_offset(first) : token_count_;
  const uint64_t stop = end < sequence_count_ ? sequence_offset(end) : token_count_;
  return tokens().subview(static_cast<std::size_t>(begin), static_cast<std::size_t>(stop - begin));
}

}  // namespace plexus::data
