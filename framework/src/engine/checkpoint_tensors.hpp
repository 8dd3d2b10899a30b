// Tensors between a model and a checkpoint, as every trainer reads and writes them: a
// tensor-parallel parameter gathered whole over tp, and a stored tensor read back into this
// rank's shard (re-padding a vocabulary padded for another tp).
#pragma once

#include <string>
#include <vector>

#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/checkpoint/stored_tensor.hpp"
#include "plexus/core/distributed/communicator.hpp"
#include "plexus/core/engine/parameters.hpp"
#include "plexus/core/engine/tensor.hpp"

namespace plexus {

// The names of a parameter's AdamW moments in optimizer.safetensors: "<name>.exp_avg",
// "<name>.exp_avg_sq".
inline constexpr const char* kMomentSuffix[2] = {".exp_avg", ".exp_avg_sq"};

// The whole tensor of a tensor-parallel parameter from every tp rank's shard `local` (collective
// over `tp`), on the host.
Tensor gather_whole(const distributed::Communicator& tp, const TensorSplit& split, const Tensor& local);

// Reads `stored` from `file` into `into`, this rank's part of a tensor cut as `split` says
// (the whole tensor when it is not split). A tensor-parallel rank reads the whole tensor and keeps
// its shard, so a checkpoint of any tp loads at any other; a vocabulary padded otherwise (the
// file's rows differ) loads its rows up to the smaller padding, zeros beyond it.
void read_tensor(Tensor& into, const checkpoint::SafetensorsFile& file,
                 const checkpoint::StoredTensor& stored, const TensorSplit& split);

// A tensor every rank of a group holds a different one of (an MoE layer's experts under ep).
struct NamedTensor {
  std::string name;
  Tensor value;
};

// Every rank's name of the group, in group-rank order, on every rank (collective over `group`).
std::vector<std::string> gather_names(const distributed::Communicator& group, const std::string& name);

// Every rank's (name, value) of the group, in group-rank order, on every rank, on the host
// (collective over `group`; every rank's value of one shape).
std::vector<NamedTensor> gather_named(const distributed::Communicator& group, const std::string& name,
                                      const Tensor& value);

}  // namespace plexus
