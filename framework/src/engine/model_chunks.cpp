// A step's microbatches on the model's chunks: the pieces a schedule drives. A chunk that does
// not start with the embedding receives the stream its predecessor ends with, and sends the
// stream's gradient back; the stream is the connection's (docs/architecture.md, "The model
// object").
#include <cmath>
#include <string>

#include "engine/model_internal.hpp"
#include "engine/pipeline_link.hpp"

namespace plexus {
namespace {

std::string where(uint32_t chunk, uint32_t microbatch) {
  return "microbatch " + std::to_string(microbatch) + " of chunk " + std::to_string(chunk);
}

}  // namespace

void Model::start_microbatches(const std::vector<Batch>& microbatches, bool training) {
  if (microbatches.empty()) throw std::runtime_error("a step needs at least one microbatch");
  runs_.clear();
  peak_in_flight_ = 0;
  const double scale = 1.0 / static_cast<double>(microbatches.size());
  runs_.resize(chunks_.size());
  for (uint32_t c = 0; c < chunks_.size(); ++c)
    for (uint32_t i = 0; i < microbatches.size(); ++i)
      runs_[c].push_back(start_run(c, microbatches[i], training, i, scale));
}

Model::Run& Model::run_of(uint32_t chunk, uint32_t microbatch) {
  if (chunk >= runs_.size() || microbatch >= runs_[chunk].size())
    throw std::runtime_error("no " + where(chunk, microbatch) + " in flight (" +
                             std::to_string(runs_.size()) + " chunks, " +
                             std::to_string(runs_.empty() ? 0 : runs_[0].size()) + " microbatches)");
  return *runs_[chunk][microbatch];
}

void Model::forward_chunk(uint32_t chunk, uint32_t microbatch) {
  Run& run = run_of(chunk, microbatch);
  for (std::size_t u = run.chunk->first_unit; u < run.chunk->end_unit; ++u)
    for (uint32_t s = 0; s < units_[u]->num_stages(); ++s) forward_stage(run, u, s);
}

void Model::backward_chunk(uint32_t chunk, uint32_t microbatch) {
  Run& run = run_of(chunk, microbatch);
  for (std::size_t u = run.chunk->end_unit; u-- > run.chunk->first_unit;)
    for (uint32_t s = units_[u]->num_stages(); s-- > 0;) backward_stage(run, u, s);
}

Tensor Model::take_chunk_output(uint32_t chunk, uint32_t microbatch) {
  Run& run = run_of(chunk, microbatch);
  if (run.chunk->head && produces_loss_)
    throw std::runtime_error(where(chunk, microbatch) + " ends with the head: its output is the loss");
  if (!run.forward_complete())
    throw std::runtime_error(where(chunk, microbatch) + ": its output is taken before its forward completed");
  if (run.chunk->head) {  // an encoder: its output layer's output
    std::vector<Tensor>& outputs = run.outputs[run.chunk->head_unit];
    if (outputs.empty() || outputs[0].empty())
      throw std::runtime_error(where(chunk, microbatch) + ": its output was taken already");
    return std::move(outputs[0]);
  }
  return connection_->take_stream(*run.connection);
}

void Model::set_chunk_input(uint32_t chunk, uint32_t microbatch, Tensor stream) {
  Run& run = run_of(chunk, microbatch);
  if (run.chunk->embedding)
    throw std::runtime_error(where(chunk, microbatch) +
                             " starts with the embedding: its input is the batch's tokens");
  connection_->set_stream(*run.connection, std::move(stream));
  run.input_set = true;
}

Tensor Model::take_chunk_input_grad(uint32_t chunk, uint32_t microbatch) {
  Run& run = run_of(chunk, microbatch);
  if (run.chunk->embedding)
    throw std::runtime_error(where(chunk, microbatch) + " starts with the embedding: no gradient leaves it");
  if (!run.backward_complete())
    throw std::runtime_error(where(chunk, microbatch) +
                             ": its input gradient is taken before its backward completed");
  return connection_->take_grad(*run.connection);
}

void Model::set_chunk_output_grad(uint32_t chunk, uint32_t microbatch, Tensor grad) {
  Run& run = run_of(chunk, microbatch);
  if (run.chunk->head && produces_loss_)
    throw std::runtime_error(where(chunk, microbatch) +
                             " ends with the head: its backward starts from the loss");
  if (run.chunk->head)
    run.output_grad = std::move(grad);  // an encoder: the gradient of its output layer's output
  else
    connection_->set_grad(*run.connection, std::move(grad));
  run.output_grad_set = true;
}

const Tensor& Model::head_output(uint32_t chunk, uint32_t microbatch, uint32_t output) {
  Run& run = run_of(chunk, microbatch);
  if (!run.chunk->head) throw std::runtime_error(where(chunk, microbatch) + " does not hold the head");
  if (!run.forward_complete())
    throw std::runtime_error(where(chunk, microbatch) +
                             ": its head output is read before its forward completed");
  const std::vector<Tensor>& outputs = run.outputs[run.chunk->head_unit];
  if (output >= outputs.size() || outputs[output].empty())
    throw std::runtime_error(where(chunk, microbatch) + ": its head has no output " + std::to_string(output) +
                             " now (taken, or freed by its backward)");
  return outputs[output];
}

double Model::finish_microbatches() {
  double loss = 0;
  std::size_t losses = 0;
  std::vector<double> mtp(plan_.mtp_depths, 0.0);
  try {
    for (uint32_t c = 0; c < runs_.size(); ++c)
      for (const auto& run : runs_[c]) {
        if (run->training && !run->backward_complete())
          throw std::runtime_error("the scheduler returned before the backward of microbatch " +
                                   std::to_string(run->microbatch) + " completed");
        for (std::size_t l = 0; l < run->chunk->logical.size(); ++l) {
          const LogicalUnit& logical = run->chunk->logical[l];
          for (std::size_t u = logical.first; u < logical.first + logical.count; ++u)
            if (run->weights[u] == WeightGrads::due)
              throw std::runtime_error(
                  "the scheduler asked for weight gradients apart (split_weight_gradients) but returned "
                  "without "
                  "calling backward_weights for microbatch " +
                  std::to_string(run->microbatch) + " of unit " + std::to_string(l) + " (" +
                  units_[u]->label + ")");
        }
        if (!run->chunk->head || !produces_loss_) continue;
        loss += run->loss;
        for (std::size_t d = 0; d < run->mtp_losses.size(); ++d) mtp[d] += run->mtp_losses[d];
        ++losses;
      }
  } catch (...) {
    runs_.clear();
    throw;
  }
  runs_.clear();
  if (!std::isfinite(loss)) throw NonFiniteError("non-finite loss");
  for (double& depth_loss : mtp) {
    if (!std::isfinite(depth_loss)) throw NonFiniteError("non-finite multi-token-prediction loss");
    if (losses > 0) depth_loss /= static_cast<double>(losses);
  }
  mtp_losses_ = std::move(mtp);
  return losses == 0 ? 0.0 : loss / static_cast<double>(losses);
}

// ---- The transfers between pipeline stages, one microbatch of one chunk at a time ----

PipelineLink& Model::link_for(const char* call) {
  if (!link_)
    throw std::runtime_error(std::string(call) +
                             ": this model is not a pipeline stage (pp = 1): there is nothing to transfer");
  return *link_;
}

// The stream between chunks of a microbatch of that run's shape.
std::vector<int64_t> Model::stream_shape_of(const Run& run) const {
  return connection_->stream_shape(run.batch_shape[0], stream_seq(run.batch_shape[1]));
}

// Starts sending chunk `chunk`'s boundary tensor of microbatch `microbatch` in `direction` (its
// output forward, its input's gradient backward).
void Model::send_boundary(bool forward, const char* call, uint32_t chunk, uint32_t microbatch,
                          Tensor tensor) {
  PipelineLink& link = link_for(call);
  link.send(forward ? PipelineLink::Direction::forward : PipelineLink::Direction::backward,
            run_of(chunk, microbatch).chunk->index, microbatch, static_cast<uint32_t>(runs_[chunk].size()),
            std::move(tensor));
}

// Starts receiving chunk `chunk`'s boundary tensor of microbatch `microbatch`, a stream of its
// run's shape (its input forward, its output's gradient backward).
void Model::receive_boundary(bool forward, const char* call, uint32_t chunk, uint32_t microbatch) {
  PipelineLink& link = link_for(call);
  const Run& run = run_of(chunk, microbatch);
  link.receive(forward ? PipelineLink::Direction::forward : PipelineLink::Direction::backward,
               run.chunk->index, microbatch, static_cast<uint32_t>(runs_[chunk].size()), stream_shape_of(run),
               settings_.activation_dtype, device_);
}

void Model::send_chunk_output(uint32_t chunk, uint32_t microbatch) {
  link_for("send_forward");  // before the output is taken from its run
  send_boundary(true, "send_forward", chunk, microbatch, take_chunk_output(chunk, microbatch));
}

void Model::receive_chunk_input(uint32_t chunk, uint32_t microbatch) {
  receive_boundary(true, "recv_forward", chunk, microbatch);
}

void Model::send_chunk_input_grad(uint32_t chunk, uint32_t microbatch) {
  link_for("send_backward");  // before the gradient is taken from its run
  send_boundary(false, "send_backward", chunk, microbatch, take_chunk_input_grad(chunk, microbatch));
}

void Model::receive_chunk_output_grad(uint32_t chunk, uint32_t microbatch) {
  receive_boundary(false, "recv_backward", chunk, microbatch);
}

void Model::finish_transfers() {
  if (link_) link_->finish();
}

void Model::abandon_transfers() noexcept {
  if (link_) link_->abandon();
}

}  // namespace plexus
