// The bridge between one encoder module and the language model (Megatron-LM's BridgeCommunicator
// and ColocatedBridgeCommunicator, in one): a microbatch's global rows [0, rows) are cut among
// the encoder's data-parallel lanes (rows / encoder_dp each) and among the language model's
// (rows / language_dp each); each lane's outputs go to the language lanes whose rows they are
// (fan-in when the encoder has more lanes, fan-out when it has fewer, one to one when equal), and
// their gradients come back the same way. A transfer between two lanes on one rank is a copy.
// The samples' numbers travel with the outputs, and the language lane checks they are its own:
// the modules' pairing of samples is checked on every microbatch, not assumed.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/mimo/mimo_modules.hpp"
#include "plexus/core/engine/tensor.hpp"

namespace plexus {

namespace distributed {
class Runtime;
}

class MimoBridge {
 public:
  // `rows`: the global microbatch's samples; `tokens`: special tokens per sample (the encoder's
  // output rows per sample); `hidden`: the language model's hidden size; `tag`: distinguishes this
  // encoder's transfers from another's.
  MimoBridge(const MimoModule& encoder, const MimoModule& language, const distributed::Runtime* runtime,
             int64_t rows, int64_t tokens, int64_t hidden, int32_t tag);

  int64_t encoder_rows() const noexcept { return encoder_rows_; }    // per encoder lane
  int64_t language_rows() const noexcept { return language_rows_; }  // per language lane
  // Forward: `output` is this rank's encoder lane's [encoder_rows, tokens, hidden] (empty when the
  // encoder is not here) for `encoder_samples`; returns the language lane's [language_rows *
  // tokens, hidden] (empty when the language model is not here) after checking its samples are
  // `language_samples`. Collective over the ranks of both modules.
  Tensor forward(const Tensor& output, const std::vector<int64_t>& encoder_samples,
                 const std::vector<int64_t>& language_samples);
  // Backward: `grad` is the language lane's [language_rows * tokens, hidden] gradient; returns the
  // encoder lane's [encoder_rows, tokens, hidden], scaled by encoder_dp / language_dp: the
  // encoder averages its gradients over its own lanes, the loss is the mean over the language
  // lanes' (Megatron-Bridge #4066: without it the encoder's gradients are off by that ratio).
  Tensor backward(const Tensor& grad);

 private:
  struct Piece {  // one transfer: encoder lane `from` to language lane `to`, global rows [first, end)
    int64_t from = 0, to = 0, first = 0, end = 0;
  };
  const MimoModule* encoder_;
  const MimoModule* language_;
  const distributed::Runtime* runtime_;
  int64_t tokens_, hidden_, encoder_rows_, language_rows_;
  int32_t tag_;
  std::vector<Piece> pieces_;
  int32_t me_ = 0;
};

}  // namespace plexus
