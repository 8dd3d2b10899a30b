// Safetensors files (https://github.com/huggingface/safetensors, format section of its README):
// the checkpoint format of Plexus, readable by the Hugging Face tools, torch and numpy.
//
//   [8 bytes]  N, the header length, unsigned 64-bit little-endian
//   [N bytes]  a UTF-8 JSON object: tensor name -> {"dtype": "F32", "shape": [2, 3],
//              "data_offsets": [begin, end]}, plus an optional "__metadata__": {string: string};
//              it starts with '{' and may be padded with trailing spaces
//   [rest]     the data buffer: every tensor's bytes, little-endian, row-major (C order),
//              at [begin, end) relative to the start of the buffer
//
// The writer pads the header with spaces so that the buffer starts 8-byte aligned, and stores
// tensors ordered by element size (largest first) so every tensor is aligned to its element size
// within the buffer (and within a memory-mapped file).
//
// The reader accepts exactly what the format allows and refuses everything else with a
// CheckpointError naming the file and the problem: a checkpoint that loads is one whose every
// tensor has a known dtype, a shape consistent with its bytes, and bytes nobody else claims,
// with no unexplained bytes in the file. Values are not checked (NaN and Inf are valid data).
//
// Byte order: the data is little-endian on disk and is not converted; the core builds only for
// little-endian hosts (checked at compile time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace plexus {

// A checkpoint file or directory could not be written, or is unusable. what() is
// "<file>: <problem>"; file() and problem() give the two parts (file() is empty when the problem
// is not tied to one file). Copying never throws (the text is shared), as exceptions are copied
// while unwinding.
class CheckpointError : public std::runtime_error {
 public:
  CheckpointError(const std::filesystem::path& file, const std::string& problem);

  [[nodiscard]] const std::string& file() const noexcept;
  [[nodiscard]] const std::string& problem() const noexcept;

 private:
  struct Parts;
  std::shared_ptr<const Parts> parts_;
};

}  // namespace plexus

namespace plexus::checkpoint {

// ------------------------------------------------------------------ dtypes ---

// The element types of the safetensors format. to_string gives the name used in files.
enum class DType : std::uint8_t {
  boolean,  // BOOL: one byte, 0 or 1
  u8,
  i8,
  f8_e5m2,  // F8_E5M2
  f8_e4m3,  // F8_E4M3
  i16,
  u16,
  f16,
  bf16,
  i32,
  u32,
  f32,
  i64,
  u64,
  f64,
};

[[nodiscard]] std::string_view to_string(DType dtype) noexcept;  // "F32", "BF16", "BOOL", ...
[[nodiscard]] std::size_t dtype_size(DType dtype) noexcept;      // bytes per element
// The dtype a file names, or nullopt for a name the format does not define (names are
// case-sensitive: "f32" is not a dtype).
[[nodiscard]] std::optional<DType> parse_dtype(std::string_view name) noexcept;
// Every dtype name, comma-separated, for messages listing what is allowed.
[[nodiscard]] std::string known_dtype_names();

// "[512, 128]"; "[]" for a scalar. Used in every message that shows a shape.
[[nodiscard]] std::string shape_text(std::span<const std::int64_t> shape);
// The number of elements of a shape (1 for a scalar, 0 when a dimension is 0), or nullopt when
// a dimension is negative or the count overflows int64.
[[nodiscard]] std::optional<std::int64_t> element_count(std::span<const std::int64_t> shape) noexcept;

// ------------------------------------------------------------------ writer ---

// One tensor to write. The bytes are NOT copied: they must stay valid until the write is done.
struct TensorData {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;  // {} for a scalar
  std::span<const std::byte> bytes;  // element_count(shape) * dtype_size(dtype) bytes, row-major
  // Instead of `bytes` (left empty): fills the tensor's bytes when the writer reaches it, so a
  // file larger than memory is written piece by piece (a sharded model gathered unit by unit).
  // Called once, in the file's storage order.
  std::function<void(std::span<std::byte>)> fill{};
};

// The "__metadata__" key under which the writer records every tensor's checksum: a compact JSON
// object, tensor name -> the XXH64 (seed 0) of the tensor's bytes as 16 lowercase hex digits,
// e.g. {"embedding.word_embeddings.weight":"3f0c9d1e5a7b2c48"}. Other tools ignore metadata, so
// the file stays a plain safetensors file; Plexus verifies the checksums when it loads a
// checkpoint (integrity.hpp).
inline constexpr const char* kChecksumKey = "plexus.xxh64";

// Collects tensors and metadata and writes them as one safetensors file, with every tensor's
// checksum under kChecksumKey (when there is any tensor).
class SafetensorsWriter {
 public:
  // Adds a tensor. Throws std::invalid_argument naming the tensor for an empty name, the
  // reserved name "__metadata__", a name added before, a negative dimension, or a byte count
  // that is not element_count(shape) * dtype_size(dtype).
  void add(TensorData tensor);
  void add(std::string name, DType dtype, std::vector<std::int64_t> shape, std::span<const std::byte> bytes);
  // Sets a "__metadata__" entry (replacing an earlier value for the key). kChecksumKey belongs
  // to the writer: a value set for it (copied from another file, say) is replaced by the
  // checksums of the tensors written.
  void set_metadata(std::string key, std::string value);

  [[nodiscard]] std::size_t tensor_count() const noexcept { return tensors_.size(); }
  // The header as it will be written, JSON padded with spaces to a multiple of 8 bytes, but with
  // every checksum a placeholder of 16 zeros: the checksums are known once the tensors' bytes are
  // (a fill runs only when the writer reaches its tensor). The written header has the same size.
  [[nodiscard]] std::string header() const;
  // The size of the whole file: 8 + header().size() + the sum of the tensors' bytes.
  [[nodiscard]] std::uint64_t file_size() const;

  using Sink = std::function<void(std::span<const std::byte>)>;
  // Rewrites bytes the sink was given before, at that offset from the start of the file.
  using Rewrite = std::function<void(std::uint64_t offset, std::span<const std::byte>)>;

  // Streams the file to sink in order: the 8-byte length, the header with placeholder checksums,
  // each tensor's bytes (hashed as they pass); then calls rewrite once, at offset 8, with the
  // header holding the real checksums (the same number of bytes). Memory holds one tensor at a
  // time. Whatever sink or rewrite throws propagates.
  void write_to(const Sink& sink, const Rewrite& rewrite) const;
  // The same for a sink that cannot rewrite: the tensors that have a fill are filled into memory
  // first (in storage order, each once), so the header is complete when it is written. For small
  // files and tests; files larger than memory go through the two-function form.
  void write_to(const Sink& sink) const;
  // The whole file in memory (small files and tests).
  [[nodiscard]] std::vector<std::byte> to_bytes() const;
  // Writes the file with write_file_atomically (atomic_file.hpp): on failure the previous
  // content of path, if any, is untouched. Throws CheckpointError naming path.
  void write(const std::filesystem::path& path) const;

 private:
  // Tensors in the order their bytes are stored: element size descending, then name.
  [[nodiscard]] std::vector<const TensorData*> storage_order() const;
  // The header with these checksums (by tensor name), or placeholders for those not given.
  [[nodiscard]] std::string header_with(
      const std::map<std::string, std::uint64_t, std::less<>>& checksums) const;

  std::vector<TensorData> tensors_;
  std::set<std::string, std::less<>> names_;  // of tensors_, to refuse a repeated name quickly
  std::map<std::string, std::string> metadata_;
};

// ------------------------------------------------------------------ reader ---

// One tensor as the header describes it.
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // data_offsets, relative to the start of the data buffer
  std::uint64_t end = 0;
};

// A validated header: what a file contains and where.
struct SafetensorsLayout {
  std::uint64_t header_size = 0;      // N, padding included
  std::vector<TensorInfo> tensors;    // ordered by data_offsets
  std::map<std::string, std::string> metadata;
  [[nodiscard]] std::uint64_t data_start() const noexcept { return 8 + header_size; }
};

// Validates a whole file's bytes (the data buffer is needed only for its size) and returns its
// layout. Throws CheckpointError naming origin for every violation of the format: fewer than 8
// bytes, a header length past the end, a header that is not a JSON object, a repeated key, a
// tensor entry without dtype/shape/data_offsets or with ill-typed ones, an unknown dtype, a
// shape whose size differs from its data_offsets span, offsets past the buffer, overlapping
// tensors, bytes belonging to no tensor, a "__metadata__" that is not an object of strings.
[[nodiscard]] SafetensorsLayout parse_layout(std::span<const std::byte> file, const std::filesystem::path& origin);

// A tensor of an open file. The views are valid while any SafetensorsFile sharing the storage
// lives.
struct TensorView {
  std::string_view name;
  DType dtype = DType::f32;
  std::span<const std::int64_t> shape;
  std::span<const std::byte> bytes;  // aligned to dtype_size only if the writer aligned it
};

enum class ReadMode {
  map,   // mmap the file: nothing is copied; the file must not be truncated while it is open
  read,  // read the whole file into memory
};

// An open, validated safetensors file. Cheap to copy: copies share the (immutable) storage.
class SafetensorsFile {
 public:
  // Opens and validates a file. Throws CheckpointError naming the file when it cannot be
  // opened or read, is not a regular file, or breaks the format (see parse_layout).
  [[nodiscard]] static SafetensorsFile open(const std::filesystem::path& file, ReadMode mode = ReadMode::map);
  // Validates bytes already in memory; origin names them in messages.
  [[nodiscard]] static SafetensorsFile from_bytes(std::vector<std::byte> bytes, const std::filesystem::path& origin);

  [[nodiscard]] const std::filesystem::path& path() const noexcept;
  [[nodiscard]] const SafetensorsLayout& layout() const noexcept;
  [[nodiscard]] std::size_t size() const noexcept;     // number of tensors
  [[nodiscard]] std::vector<std::string> names() const;  // sorted
  [[nodiscard]] bool contains(std::string_view name) const noexcept;
  // The tensor's header entry and bytes. Throws CheckpointError naming the file and the tensor
  // when there is no such tensor.
  [[nodiscard]] const TensorInfo& info(std::string_view name) const;
  [[nodiscard]] TensorView tensor(std::string_view name) const;
  [[nodiscard]] std::vector<TensorView> tensors() const;  // in storage order
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const noexcept;

 private:
  struct State;
  explicit SafetensorsFile(std::shared_ptr<const State> state);
  // Validates the bytes that owner keeps alive.
  [[nodiscard]] static SafetensorsFile validated(std::filesystem::path origin, std::shared_ptr<const void> owner,
                                                 std::span<const std::byte> bytes);
  [[nodiscard]] TensorView view(const TensorInfo& info) const;
  std::shared_ptr<const State> state_;
};

}  // namespace plexus::checkpoint
