#include "engine/mimo/mimo_bridge.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "plexus/core/device.hpp"
#include "plexus/core/distributed/runtime.hpp"

namespace plexus {
namespace {

// Rows [first, end) of a [rows, ...] tensor whose rows are `row_elements` float32 values each, as
// a tensor borrowing its memory.
Tensor rows_of(const Tensor& t, int64_t first, int64_t end, int64_t row_elements) {
  return Tensor::borrowed(t.data<float>() + first * row_elements, {(end - first) * row_elements},
                          plx_dtype_f32(), t.device());
}

std::string samples_text(const std::vector<int64_t>& samples) {
  std::string text;
  for (std::size_t i = 0; i < samples.size() && i < 8; ++i)
    text += (i ? ", " : "") + std::to_string(samples[i]);
  return text + (samples.size() > 8 ? ", ..." : "");
}

}  // namespace

MimoBridge::MimoBridge(const MimoModule& encoder, const MimoModule& language,
                       const distributed::Runtime* runtime, int64_t rows, int64_t tokens, int64_t hidden,
                       int32_t tag)
    : encoder_(&encoder),
      language_(&language),
      runtime_(runtime),
      tokens_(tokens),
      hidden_(hidden),
      encoder_rows_(rows / encoder.dp_size),
      language_rows_(rows / language.dp_size),
      tag_(tag),
      me_(runtime != nullptr ? runtime->rank() : 0) {
  if (rows % encoder.dp_size != 0 || rows % language.dp_size != 0)
    throw config::ConfigError(
        "train.micro_batch_size",
        "a microbatch of " + std::to_string(rows) + " samples over the language model's " +
            std::to_string(language.dp_size) + " lanes cannot be cut evenly among the " +
            std::to_string(encoder.dp_size) + " data-parallel lanes of " + encoder.name +
            ": micro_batch_size x language dp must be divisible by " + encoder.name + "'s dp");
  for (int64_t from = 0; from < encoder.dp_size; ++from)
    for (int64_t to = 0; to < language.dp_size; ++to) {
      const int64_t first = std::max(from * encoder_rows_, to * language_rows_);
      const int64_t end = std::min((from + 1) * encoder_rows_, (to + 1) * language_rows_);
      if (first < end) pieces_.push_back({from, to, first, end});
    }
}

void MimoBridge::start_send(Tensor tensor, int32_t to, int32_t tag) {
  Sent sent{std::move(tensor), {}};
  sent.request = runtime_->world().start_send(sent.tensor.view(), to, tag);
  sent_.push_back(std::move(sent));
}

void MimoBridge::send_outputs(uint32_t k, Tensor output, const std::vector<int64_t>& encoder_samples) {
  if (output.shape() != std::vector<int64_t>{encoder_rows_, tokens_, hidden_})
    throw std::runtime_error(encoder_->name + ": its output is " + shape_string(output.shape()) +
                             "; the bridge to the language model expects [" + std::to_string(encoder_rows_) +
                             ", " + std::to_string(tokens_) + ", " + std::to_string(hidden_) +
                             "] (samples, special tokens per sample, the language model's hidden size)");
  if (!encoder_->leader) return;  // the lane's leader sends; its tp ranks hold the same rows
  const int64_t row = tokens_ * hidden_;
  bool local = false;
  for (const Piece& piece : pieces_) {
    if (piece.from != encoder_->dp_rank) continue;
    const int32_t to = language_->lane_rank[static_cast<std::size_t>(piece.to)];
    if (to == me_) {  // the language lane on this rank takes them from local_outputs_
      local = true;
      continue;
    }
    const int64_t at = piece.first - piece.from * encoder_rows_, count = piece.end - piece.first;
    Tensor ids({count}, plx_dtype_i64());
    std::copy_n(encoder_samples.begin() + at, count, ids.data<int64_t>());
    start_send(std::move(ids), to, tag_);
    Tensor rows({count * row}, plx_dtype_f32());
    rows.copy_from(rows_of(output, at, at + count, row));
    start_send(std::move(rows), to, tag_);
  }
  if (local) local_outputs_[k] = Local{std::move(output), encoder_samples};
}

Tensor MimoBridge::receive_outputs(uint32_t k, const std::vector<int64_t>& language_samples) {
  const int64_t row = tokens_ * hidden_;
  Tensor received({language_rows_ * tokens_, hidden_}, plx_dtype_f32());
  if (!language_->leader) {  // the lane's leader received them: they come over tp
    language_->tp->broadcast(received.view(), 0);
    return received;
  }
  std::vector<int64_t> seen(static_cast<std::size_t>(language_rows_), -1);
  std::vector<distributed::Request> requests;
  std::vector<std::vector<int64_t>> id_buffers(pieces_.size());
  for (std::size_t p = 0; p < pieces_.size(); ++p) {
    const Piece& piece = pieces_[p];
    if (piece.to != language_->dp_rank) continue;
    const int32_t from = encoder_->lane_rank[static_cast<std::size_t>(piece.from)];
    const int64_t into = piece.first - piece.to * language_rows_, count = piece.end - piece.first;
    if (from == me_) {  // both lanes are here: the encoder's half left its rows
      const auto local = local_outputs_.find(k);
      if (local == local_outputs_.end())
        throw std::runtime_error("mimo: the language model waits for " + encoder_->name +
                                 "'s rows of microbatch " + std::to_string(k) +
                                 ", which its encoder lane on this rank has not sent");
      const int64_t at = piece.first - piece.from * encoder_rows_;
      device::copy(received.data<float>() + into * row, received.device(),
                   local->second.rows.data<float>() + at * row, local->second.rows.device(),
                   static_cast<std::size_t>(count * row) * sizeof(float));
      std::copy_n(local->second.samples.begin() + at, count, seen.begin() + into);
      continue;
    }
    id_buffers[p].assign(static_cast<std::size_t>(count), -1);
    const Tensor ids = Tensor::borrowed(id_buffers[p].data(), {count}, plx_dtype_i64(), DLDevice{kDLCPU, 0});
    requests.push_back(runtime_->world().start_recv(ids.view(), from, tag_));
    requests.push_back(
        runtime_->world().start_recv(rows_of(received, into, into + count, row).view(), from, tag_));
  }
  for (distributed::Request& r : requests) r.wait();
  for (std::size_t p = 0; p < pieces_.size(); ++p)
    std::copy(id_buffers[p].begin(), id_buffers[p].end(),
              seen.begin() + (pieces_[p].first - pieces_[p].to * language_rows_));
  if (seen != language_samples)
    throw std::runtime_error(
        "mimo: " + encoder_->name + "'s outputs are of samples [" + samples_text(seen) +
        "] but language lane " + std::to_string(language_->dp_rank) + " holds samples [" +
        samples_text(language_samples) +
        "]: the modules' samples are misaligned (each image must reach the text it belongs to)");
  if (language_->tp != nullptr) language_->tp->broadcast(received.view(), 0);  // the lane's other tp ranks
  return received;
}

void MimoBridge::send_grads(uint32_t k, const Tensor& grad) {
  if (!language_->leader) return;  // the lane's leader sends; its tp ranks hold the same gradient
  const int64_t row = tokens_ * hidden_;
  bool local = false;
  for (const Piece& piece : pieces_) {
    if (piece.to != language_->dp_rank) continue;
    const int32_t from = encoder_->lane_rank[static_cast<std::size_t>(piece.from)];
    if (from == me_) {  // the encoder lane on this rank takes it from local_grads_
      local = true;
      continue;
    }
    const int64_t at = piece.first - piece.to * language_rows_, count = piece.end - piece.first;
    Tensor rows({count * row}, plx_dtype_f32());
    rows.copy_from(rows_of(grad, at, at + count, row));
    start_send(std::move(rows), from, tag_ + 1);
  }
  if (local) local_grads_[k] = Local{grad.to(DLDevice{kDLCPU, 0}), {}};
}

Tensor MimoBridge::receive_grads(uint32_t k) {
  const int64_t row = tokens_ * hidden_;
  Tensor received({encoder_rows_, tokens_, hidden_}, plx_dtype_f32());
  if (encoder_->leader) {
    std::vector<distributed::Request> requests;
    for (const Piece& piece : pieces_) {
      if (piece.from != encoder_->dp_rank) continue;
      const int32_t to = language_->lane_rank[static_cast<std::size_t>(piece.to)];
      const int64_t at = piece.first - piece.from * encoder_rows_, count = piece.end - piece.first;
      if (to == me_) {  // both lanes are here: the language model's half left the gradient
        const auto local = local_grads_.find(k);
        if (local == local_grads_.end())
          throw std::runtime_error("mimo: " + encoder_->name + " waits for the gradient of microbatch " +
                                   std::to_string(k) + ", which the language lane on this rank has not sent");
        const int64_t from = piece.first - piece.to * language_rows_;
        device::copy(received.data<float>() + at * row, received.device(),
                     local->second.rows.data<float>() + from * row, local->second.rows.device(),
                     static_cast<std::size_t>(count * row) * sizeof(float));
        continue;
      }
      requests.push_back(
          runtime_->world().start_recv(rows_of(received, at, at + count, row).view(), to, tag_ + 1));
    }
    for (distributed::Request& r : requests) r.wait();
  }
  // The lane's leader received them: its other tp ranks get them over tp.
  if (encoder_->tp != nullptr) encoder_->tp->broadcast(received.view(), encoder_->tp->size() - 1);
  if (encoder_->dp_size != language_->dp_size) {
    const float scale = static_cast<float>(encoder_->dp_size) / static_cast<float>(language_->dp_size);
    float* g = received.data<float>();
    for (int64_t i = 0; i < received.numel(); ++i) g[i] *= scale;
  }
  return received;
}

void MimoBridge::finish() {
  for (Sent& s : sent_) s.request.wait();
  sent_.clear();
  local_outputs_.clear();
  local_grads_.clear();
}

void MimoBridge::abandon() noexcept {
  sent_.clear();  // each request's destructor completes it
  local_outputs_.clear();
  local_grads_.clear();
}

}  // namespace plexus
