// How a tensor the engine holds appears in a checkpoint file: its name there and its shape
// there. Two things may differ from memory:
//
//  - the spelling of the name (tensor_names.hpp): written as checkpoint.names says, read in
//    either spelling or under an alias;
//  - the layout of the mHC projection phi ("decoder.layers.<i>.<sub>_hyper_connection.
//    mapping_proj.weight", and its optimizer moments). The "mhc" family takes phi as
//    [n*C, n*n + 2n] (input rows, output columns); a checkpoint stores it as Megatron's
//    nn.Linear(n*C, n*n + 2n) holds its weight, [n*n + 2n, n*C], like every other linear weight.
//
// Checkpoints written before phi was stored transposed held it as in memory. Every file written
// since says so in its metadata: kLinearLayoutKey = kLinearLayoutOutIn. A file without that key
// holds phi in the earlier layout when phi's stored shape is the in-memory one, [n*C, n*n + 2n],
// and in Megatron's otherwise (a checkpoint converted from Megatron by a tool that does not
// write the key). When C = n + 2 both shapes are [n*n + 2n, n*n + 2n]: a file with the key is
// then in Megatron's layout, one without it in the earlier layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/checkpoint/tensor_names.hpp"

namespace plexus::checkpoint {

inline constexpr const char* kLinearLayoutKey = "plexus.linear_weight_layout";
inline constexpr const char* kLinearLayoutOutIn = "[out, in]";

// Whether the tensor `name` (a parameter, or a name derived from one: "<parameter>.exp_avg") is
// stored as the transpose of its two-dimensional in-memory layout: the mHC projection phi.
[[nodiscard]] bool stored_transposed(std::string_view name);

struct StoredTensor {
  std::string name;                 // the name in the file
  std::vector<std::int64_t> shape;  // the shape in the file
  bool transposed = false;          // the file holds the transpose of the in-memory matrix
  bool earlier_layout = false;      // phi of a file without kLinearLayoutKey, stored as in memory
};

// How the tensor named `names`, of in-memory `shape`, is written under `style`.
[[nodiscard]] StoredTensor stored_form(const TensorNames& names, std::span<const std::int64_t> shape,
                                       NameStyle style);

// Where the tensor named `names` (either spelling, or an alias), of in-memory `shape`, is in
// `file` and in which layout. A tensor the file lacks comes back under its `style` spelling in the
// shape it should have, for expect_tensors_match to report as missing. Throws CheckpointError
// naming the file when the file holds the tensor under both spellings (naming both), or when its
// kLinearLayoutKey has a value this version does not know.
[[nodiscard]] StoredTensor locate(const SafetensorsFile& file, const TensorNames& names,
                                  std::span<const std::int64_t> shape, NameStyle style);

// Writes the transpose of the row-major [rows, cols] matrix src (elements of element_size
// bytes) to dst as [cols, rows]. Throws std::invalid_argument when a span's size does not fit.
void transpose(std::span<const std::byte> src, std::int64_t rows, std::int64_t cols, std::size_t element_size,
               std::span<std::byte> dst);

}  // namespace plexus::checkpoint
