// MIMO's splice (Megatron-LM's align_embeddings_by_token_positions): a language model's input
// sequence holds special tokens (an image's placeholders) whose embeddings are a modality
// encoder's outputs, not rows of the word embedding. The embedding runs on every token; then, in
// the microbatch's row-major (batch, sequence) order, the rows at a special token are replaced by
// the modality's, whose count must match. Backward hands those rows' gradient to the modality
// and zeroes them, so the placeholder's own embedding row gets none, as in Megatron, which never
// looks the special tokens up.
#include <string>
#include <vector>

#include "engine/model_internal.hpp"
#include "plexus/core/device.hpp"

namespace plexus {
namespace {

std::string where(const Model::Run& run) {
  return "microbatch " + std::to_string(run.microbatch) + " of chunk " + std::to_string(run.chunk->index);
}

// Row `row` of a [rows, hidden] view of `t`.
char* row_of(const Tensor& t, int64_t row, std::size_t row_bytes) {
  return static_cast<char*>(t.raw()) + static_cast<std::size_t>(row) * row_bytes;
}

}  // namespace

void Model::find_splice_positions(Run& run, const Batch& batch) const {
  if (splice_tokens_.empty()) return;
  const Tensor tokens = batch.tokens.to(DLDevice{kDLCPU, 0});
  const auto* ids = tokens.data<int32_t>();
  run.splice_positions.assign(splice_tokens_.size(), {});
  run.splice_rows.clear();
  run.splice_rows.resize(splice_tokens_.size());
  run.splice_grads.clear();
  run.splice_grads.resize(splice_tokens_.size());
  for (int64_t i = 0; i < tokens.numel(); ++i)
    for (std::size_t k = 0; k < splice_tokens_.size(); ++k)
      if (ids[i] == splice_tokens_[k]) run.splice_positions[k].push_back(i);
}

void Model::set_splice(uint32_t chunk, uint32_t microbatch, std::size_t token, Tensor rows) {
  Run& run = run_of(chunk, microbatch);
  if (!run.chunk->embedding || token >= splice_tokens_.size())
    throw std::runtime_error(where(run) + ": no special token " + std::to_string(token) +
                             " to splice (a chunk with the embedding of a model with " +
                             std::to_string(splice_tokens_.size()) + " special token(s))");
  const std::size_t n = run.splice_positions[token].size();
  const std::vector<int64_t> expected{static_cast<int64_t>(n), settings_.hidden_size};
  if (rows.shape() != expected || !plx_dtype_equal(rows.dtype(), settings_.activation_dtype))
    throw std::runtime_error(where(run) + " holds " + std::to_string(n) + " of special token " +
                             std::to_string(splice_tokens_[token]) + ", so its embeddings must be " +
                             dtype_name(settings_.activation_dtype) + " " + shape_string(expected) +
                             ", got " + dtype_name(rows.dtype()) + " " + shape_string(rows.shape()));
  run.splice_rows[token] =
      rows.device().device_type == device_.device_type ? std::move(rows) : rows.to(device_);
}

void Model::splice_forward(Run& run, Tensor& embedded) const {
  const std::size_t row_bytes =
      static_cast<std::size_t>(settings_.hidden_size) * dtype_bytes(embedded.dtype());
  for (std::size_t k = 0; k < run.splice_positions.size(); ++k) {
    const std::vector<int64_t>& positions = run.splice_positions[k];
    if (positions.empty()) continue;
    const Tensor& rows = run.splice_rows[k];
    if (rows.empty())
      throw std::runtime_error(where(run) + " holds " + std::to_string(positions.size()) +
                               " of special token " + std::to_string(splice_tokens_[k]) +
                               " but its modality's embeddings were not set (set_splice)");
    for (std::size_t i = 0; i < positions.size(); ++i)
      device::copy(row_of(embedded, positions[i], row_bytes), embedded.device(),
                   row_of(rows, static_cast<int64_t>(i), row_bytes), rows.device(), row_bytes);
    run.splice_rows[k] = Tensor();  // copied into the stream
  }
}

void Model::splice_backward(Run& run, const Tensor& grad) const {
  const std::size_t row_bytes = static_cast<std::size_t>(settings_.hidden_size) * dtype_bytes(grad.dtype());
  const std::vector<char> zeros(row_bytes, 0);
  for (std::size_t k = 0; k < run.splice_positions.size(); ++k) {
    const std::vector<int64_t>& positions = run.splice_positions[k];
    Tensor out = Tensor::uninitialized({static_cast<int64_t>(positions.size()), settings_.hidden_size},
                                       grad.dtype(), grad.device());
    for (std::size_t i = 0; i < positions.size(); ++i) {
      char* at = row_of(grad, positions[i], row_bytes);
      device::copy(row_of(out, static_cast<int64_t>(i), row_bytes), out.device(), at, grad.device(),
                   row_bytes);
      device::copy(at, grad.device(), zeros.data(), DLDevice{kDLCPU, 0}, row_bytes);
    }
    run.splice_grads[k] = std::move(out);
  }
}

Tensor Model::take_splice_grad(uint32_t chunk, uint32_t microbatch, std::size_t token) {
  Run& run = run_of(chunk, microbatch);
  if (token >= run.splice_grads.size())
    throw std::runtime_error(where(run) + ": no special token " + std::to_string(token) + " was spliced");
  if (!run.backward_complete() || run.splice_grads[token].empty())
    throw std::runtime_error(where(run) + ": the gradient of special token " +
                             std::to_string(splice_tokens_[token]) +
                             "'s embeddings is taken before the chunk's backward completed, or twice");
  return std::move(run.splice_grads[token]);
}

}  // namespace plexus
