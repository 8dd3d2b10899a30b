#include "plexus/core/checkpoint/stored_tensor.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace plexus::checkpoint {

namespace {

// phi's name after "decoder.layers.<i>.self_attention" or "...mlp".
constexpr std::string_view kPhiSuffix = "_hyper_connection.mapping_proj.weight";

std::vector<std::int64_t> reversed(std::span<const std::int64_t> shape) {
  return {shape.rbegin(), shape.rend()};
}

// The file's layout marker, checked: true when present (Megatron's layout), false when absent
// (a file from before the marker existed).
bool has_layout_marker(const SafetensorsFile& file) {
  const auto& metadata = file.metadata();
  const auto it = metadata.find(kLinearLayoutKey);
  if (it == metadata.end()) return false;
  if (it->second != kLinearLayoutOutIn)
    throw CheckpointError(file.path(), std::string("metadata \"") + kLinearLayoutKey + "\" is \"" +
                                           it->second + "\"; this version reads \"" + kLinearLayoutOutIn +
                                           "\", or no such key (files written before it existed)");
  return true;
}

}  // namespace

bool stored_transposed(std::string_view name) {
  const std::size_t at = name.find(kPhiSuffix);
  if (at == std::string_view::npos) return false;
  const std::size_t end = at + kPhiSuffix.size();
  return end == name.size() || name[end] == '.';
}

StoredTensor stored_form(const TensorNames& names, std::span<const std::int64_t> shape, NameStyle style) {
  StoredTensor form{names.in(style), {shape.begin(), shape.end()}};
  if (stored_transposed(names.local) && shape.size() == 2) {
    form.shape = reversed(shape);
    form.transposed = true;
  }
  return form;
}

StoredTensor locate(const SafetensorsFile& file, const TensorNames& names, std::span<const std::int64_t> shape,
                    NameStyle style) {
  const bool marked = has_layout_marker(file);
  const bool has_local = file.contains(names.local);
  const bool has_te = names.differ() && file.contains(names.te);
  if (has_local && has_te)
    throw CheckpointError(file.path(), "holds tensor " + names.local + " twice, also as " + names.te +
                                           " (its Transformer Engine spelling): keep one of them");
  StoredTensor found = stored_form(names, shape, style);
  if (has_local || has_te) {
    found.name = has_te ? names.te : names.local;
  } else {
    for (const std::string& alias : names.aliases)
      if (file.contains(alias)) {
        found.name = alias;  // another stack's name for it (Megatron's hybrid final norm)
        break;
      }
  }
  if (found.transposed && !marked && file.contains(found.name)) {
    const auto& stored_shape = file.info(found.name).shape;
    if (std::equal(stored_shape.begin(), stored_shape.end(), shape.begin(), shape.end())) {
      found.shape.assign(shape.begin(), shape.end());
      found.transposed = false;
      found.earlier_layout = true;
    }
  }
  return found;
}

void transpose(std::span<const std::byte> src, std::int64_t rows, std::int64_t cols, std::size_t element_size,
               std::span<std::byte> dst) {
  if (rows < 0 || cols < 0)
    throw std::invalid_argument("transpose: negative shape [" + std::to_string(rows) + ", " +
                                std::to_string(cols) + "]");
  const auto r = static_cast<std::size_t>(rows);
  const auto c = static_cast<std::size_t>(cols);
  const std::size_t bytes = r * c * element_size;
  if (src.size() != bytes || dst.size() != bytes)
    throw std::invalid_argument("transpose: [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                "] of " + std::to_string(element_size) + "-byte elements needs " +
                                std::to_string(bytes) + " bytes, got " + std::to_string(src.size()) +
                                " in and " + std::to_string(dst.size()) + " out");
  // Element by element through memcpy: the file's bytes need not be aligned to the element.
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j)
      std::memcpy(dst.data() + (j * r + i) * element_size, src.data() + (i * c + j) * element_size,
                  element_size);
}

}  // namespace plexus::checkpoint
