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
#include <map>
#include <vector>

#include "engine/mimo/mimo_modules.hpp"
#include "plexus/core/distributed/communicator.hpp"
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

  // Forward of microbatch `k`, in two halves that a pipeline schedule calls on the modules' own
  // ranks, each at its own time (they meet as Megatron's stages do: the encoder's last stage
  // sends, the language model's first receives):
  // send_outputs, on a rank at the encoder's bridge stage: `output` is its lane's [encoder_rows,
  // tokens, hidden] for `encoder_samples`; its leader starts sending the rows to the language
  // lanes whose samples they are, and returns at once.
  void send_outputs(uint32_t k, Tensor output, const std::vector<int64_t>& encoder_samples);
  // receive_outputs, on a rank at the language model's bridge stage: waits for its lane's rows,
  // [language_rows * tokens, hidden], checks they are of `language_samples`, and hands them on
  // (its tp ranks get them from the lane's leader).
  Tensor receive_outputs(uint32_t k, const std::vector<int64_t>& language_samples);
  // Backward the same way: the language lane's leader starts sending the gradient of its rows,
  // [language_rows * tokens, hidden], to the encoder lanes they came from; an encoder lane waits
  // for its rows' gradient, [encoder_rows, tokens, hidden], scaled by encoder_dp / language_dp:
  // the encoder averages its gradients over its own lanes, the loss is the mean over the language
  // lanes' (Megatron-Bridge #4066: without it the encoder's gradients are off by that ratio).
  void send_grads(uint32_t k, const Tensor& grad);
  Tensor receive_grads(uint32_t k);
  // Completes every send started (the end of a step or an evaluation batch). On a failure,
  // abandon drops them.
  void finish();
  void abandon() noexcept;

 private:
  struct Piece {  // one transfer: encoder lane `from` to language lane `to`, global rows [first, end)
    int64_t from = 0, to = 0, first = 0, end = 0;
  };
  struct Sent {  // a send in flight and what it reads
    Tensor tensor;
    distributed::Request request;
  };
  // A transfer between two lanes on this rank: what the sending half left for the receiving one.
  struct Local {
    Tensor rows;
    std::vector<int64_t> samples;
  };
  void start_send(Tensor tensor, int32_t to, int32_t tag);

  const MimoModule* encoder_;
  const MimoModule* language_;
  const distributed::Runtime* runtime_;
  int64_t tokens_, hidden_, encoder_rows_, language_rows_;
  int32_t tag_;
  std::vector<Piece> pieces_;
  int32_t me_ = 0;
  std::vector<Sent> sent_;
  std::map<uint32_t, Local> local_outputs_, local_grads_;  // by microbatch
};

}  // namespace plexus
