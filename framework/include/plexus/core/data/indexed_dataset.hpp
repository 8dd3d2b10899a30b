// Token datasets in Megatron-LM's indexed dataset format ("MMIDIDX"): a PREFIX.bin holding
// every sequence's token ids back to back, and a PREFIX.idx describing them. Files written
// by Megatron-LM's tools/preprocess_data.py load here, and files written here load in Megatron.
//
// The format, as written by megatron/core/datasets/indexed_dataset.py (_IndexWriter) and read
// by its _IndexReader (verified against NVIDIA/Megatron-LM's source; see the note below):
//
//   PREFIX.idx, all integers little-endian, no padding or alignment:
//     offset 0   9 bytes   magic "MMIDIDX\x00\x00"
//     offset 9   uint64    version, always 1
//     offset 17  uint8     dtype code of the tokens in .bin: 1 uint8, 2 int8, 3 int16,
//                          4 int32, 5 int64, 6 float64, 7 float32, 8 uint16
//     offset 18  uint64    S, the sequence count
//     offset 26  uint64    D, the document-index count (documents + 1)
//     offset 34  int32[S]  each sequence's length in tokens
//                int64[S]  each sequence's byte offset into .bin
//                int64[D]  document indices: 0, then for each document the index of the
//                          sequence after its last one (cumulative), so the last is S
//                int8[S]   (multimodal datasets only) each sequence's mode; ignored here
//   PREFIX.bin: the tokens of sequence 0, 1, ... S-1, concatenated, in the dtype.
//
// Megatron's writer always lays sequences out contiguously from offset 0 (its pointers are
// the running sum of length * itemsize), and Megatron's preprocess_data.py writes one
// sequence per document unless --split-sentences is given. The writer here does the same
// (one sequence per document); the reader accepts several sequences per document.
//
// What was verified, and how: the layout above was read off NVIDIA/Megatron-LM
// megatron/core/datasets/indexed_dataset.py (_INDEX_HEADER, DType, _IndexWriter.__enter__ and
// write, _IndexReader.__init__, IndexedDatasetBuilder.add_document/end_document/finalize, and
// IndexedDataset's assertion sequence_lengths.shape[0] == document_indices[-1]), and off
// tools/preprocess_data.py (Encoder.encode makes one sequence per document unless
// --split-sentences; it drops empty sentences, so an empty document has no sequence at all
// and repeats a document index, which the reader accepts; the dtype is
// DType.optimal_dtype(vocab_size): uint16 for a vocabulary under 65500, else int32). The tests
// check this code against a file built byte by byte from that description and, in both
// directions, against tests/reference/megatron_indexed_dataset.py, which re-implements
// _IndexReader/_IndexWriter with numpy the same way Megatron does.
//
// Plexus reads integer token datasets only: the float dtype codes are valid Megatron files
// but not token ids, and are refused with a message saying so. The host must be
// little-endian (checked at compile time), as the files are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace plexus {

// A token dataset or its input could not be read, written or used. what() is complete and
// user-facing; it names the file (or dataset) and the problem. file() is that file, or ""
// when the problem is not tied to one.
class DataError : public std::runtime_error {
 public:
  DataError(std::string file, const std::string& message) : std::runtime_error(message), file_(std::move(file)) {}
  const std::string& file() const noexcept { return file_; }

 private:
  std::string file_;
};

}  // namespace plexus

namespace plexus::data {

// Megatron's dtype codes (megatron.core.datasets.indexed_dataset.DType).
enum class TokenDtype : uint8_t { uint8 = 1, int8 = 2, int16 = 3, int32 = 4, int64 = 5, float64 = 6, float32 = 7, uint16 = 8 };

std::size_t dtype_size(TokenDtype dtype) noexcept;
std::string_view dtype_name(TokenDtype dtype) noexcept;            // "uint16", ...
std::optional<TokenDtype> dtype_from_code(uint8_t code) noexcept;  // any of the 8 codes
std::optional<TokenDtype> dtype_from_name(std::string_view name) noexcept;
bool is_integer_dtype(TokenDtype dtype) noexcept;  // every dtype except float32/float64
// The smallest and largest token id the dtype can hold (integer dtypes).
int64_t dtype_min(TokenDtype dtype) noexcept;
int64_t dtype_max(TokenDtype dtype) noexcept;

// PREFIX + ".idx" / PREFIX + ".bin" (the suffix is appended, never replaced, as Megatron does).
std::filesystem::path idx_path(const std::filesystem::path& prefix);
std::filesystem::path bin_path(const std::filesystem::path& prefix);

// A read-only memory map of a whole file, unmapped on destruction. An empty file maps to an
// empty span. Errors (missing, not a regular file, unreadable) throw DataError naming the file.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::filesystem::path& file);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  void reset() noexcept;
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// A run of tokens in a mapped .bin, read as int64 whatever the stored integer dtype.
// Valid while the IndexedDataset it came from lives.
class TokenView {
 public:
  TokenView() = default;
  TokenView(const std::byte* data, std::size_t count, TokenDtype dtype) noexcept
      : data_(data), count_(count), dtype_(dtype) {}

  std::size_t size() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }
  TokenDtype dtype() const noexcept { return dtype_; }
  int64_t operator[](std::size_t index) const noexcept;  // unchecked
  int64_t at(std::size_t index) const;                   // throws std::out_of_range
  TokenView subview(std::size_t offset, std::size_t count) const;  // throws std::out_of_range
  // Converts tokens [offset, offset + out.size()) into out; throws std::out_of_range.
  void copy_to(std::size_t offset, std::span<int64_t> out) const;
  std::vector<int64_t> to_vector() const;

  // The smallest and largest token id of the view (min > max when it is empty): one threaded
  // pass (100M uint16 tokens from the page cache: 0.15 to 0.3 s on a busy 2-core machine).
  struct IdRange {
    int64_t min = 1, max = 0;
  };
  IdRange id_range() const noexcept;

 private:
  const std::byte* data_ = nullptr;
  std::size_t count_ = 0;
  TokenDtype dtype_ = TokenDtype::uint16;
};

// Writes PREFIX.bin and PREFIX.idx. Everything goes to temporary files beside them
// (PREFIX.bin.tmp-<pid>-<n>, ...) that finalize() renames into place, .bin first then .idx;
// a writer destroyed without finalize() (an exception, an empty result) removes its temporary
// files and leaves any existing PREFIX.bin/.idx untouched. If renaming the .idx fails after
// the .bin was renamed, the new .bin is removed again so no mismatched pair is left.
class IndexedDatasetWriter {
 public:
  // Opens the temporary .bin at once, so an unwritable location is reported before any work.
  // dtype must be an integer dtype.
  IndexedDatasetWriter(std::filesystem::path prefix, TokenDtype dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document as one sequence (Megatron's default layout; an empty document
  // becomes one zero-length sequence, which Megatron reads as well). Every token must fit
  // the dtype and a document may hold at most INT32_MAX tokens (the .idx stores int32
  // lengths); otherwise DataError, and nothing of this document is written.
  void add_document(std::span<const int64_t> tokens);
  void add_document(std::span<const int32_t> tokens);

  // Writes the .idx and renames both files into place. Call once; later adds throw.
  void finalize();

  const std::filesystem::path& prefix() const noexcept { return prefix_; }
  TokenDtype dtype() const noexcept { return dtype_; }
  std::size_t document_count() const noexcept { return lengths_.size(); }
  uint64_t token_count() const noexcept { return tokens_; }
  uint64_t bin_bytes() const noexcept { return tokens_ * dtype_size(dtype_); }
  uint64_t idx_bytes() const noexcept;  // the size the .idx has (or will have)

 private:
  template <typename T>
  void add(std::span<const T> tokens);
  void discard() noexcept;

  std::filesystem::path prefix_;
  TokenDtype dtype_;
  std::filesystem::path bin_tmp_, idx_tmp_;
  std::ofstream bin_;
  std::vector<int32_t> lengths_;
  std::vector<char> buffer_;
  uint64_t tokens_ = 0;
  bool finalized_ = false;
};

// A Megatron indexed dataset opened read-only: both files memory-mapped and checked
// completely when opened, so every accessor afterwards is safe. Each problem is a DataError
// naming the file: a missing file, a bad magic ("not a Megatron indexed dataset (.idx magic)"),
// an unsupported version, an unknown or non-integer dtype code, an .idx whose size does not
// match the counts in its header, document indices that do not run from 0 to the sequence
// count, negative lengths, a .bin whose size does not match the lengths, and sequence
// pointers that are out of bounds or not contiguous.
class IndexedDataset {
 public:
  explicit IndexedDataset(std::filesystem::path prefix);

  const std::filesystem::path& prefix() const noexcept { return prefix_; }
  TokenDtype dtype() const noexcept { return dtype_; }
  std::size_t sequence_count() const noexcept { return sequence_count_; }
  std::size_t document_count() const noexcept { return document_index_count_ - 1; }  // documents
  uint64_t token_count() const noexcept { return token_count_; }
  bool multimodal() const noexcept { return multimodal_; }  // the .idx carries sequence modes

  uint32_t sequence_length(std::size_t sequence) const;   // throws std::out_of_range
  uint64_t sequence_pointer(std::size_t sequence) const;  // byte offset into .bin
  uint64_t sequence_offset(std::size_t sequence) const;   // token offset into tokens()
  // Entry i of the .idx's document index list (0 .. document_count() inclusive); document d
  // is sequences [document_index(d), document_index(d + 1)).
  uint64_t document_index(std::size_t i) const;

  TokenView sequence(std::size_t sequence) const;
  TokenView document(std::size_t document) const;  // its sequences' tokens, contiguous
  TokenView tokens() const noexcept;                // every token, in order
  // The whole .idx as mapped (tokenizer_fingerprint.hpp ties its record to these bytes).
  std::span<const std::byte> index_bytes() const noexcept { return idx_.bytes(); }

 private:
  int64_t read_i64(std::size_t offset) const noexcept;
  int32_t read_i32(std::size_t offset) const noexcept;
  void validate();

  std::filesystem::path prefix_;
  MappedFile idx_, bin_;
  TokenDtype dtype_ = TokenDtype::uint16;
  std::size_t sequence_count_ = 0;
  std::size_t document_index_count_ = 0;
  uint64_t token_count_ = 0;
  std::size_t lengths_at_ = 0, pointers_at_ = 0, documents_at_ = 0;
  bool multimodal_ = false;
};

}  // namespace plexus::data
