// The trainer's checkpoint helpers shared by the whole-model path (trainer_checkpoint.cpp) and
// the path through a data-parallel strategy (trainer_checkpoint_sharded.cpp).
#pragma once

#include <deque>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/checkpoint/stored_tensor.hpp"
#include "plexus/core/checkpoint/tensor_names.hpp"
#include "plexus/core/distributed/communicator.hpp"
#include "plexus/core/engine/tensor.hpp"

namespace plexus::checkpoint_io {

// The bytes of a tensor for the writer, as `form` stores it (host copies and transposes kept in
// `staged`).
checkpoint::TensorData tensor_data(const checkpoint::StoredTensor& form, const Tensor& t, std::deque<Tensor>& staged);
checkpoint::TensorData tensor_data(const std::string& name, const Tensor& t, checkpoint::NameStyle style,
                                   std::deque<Tensor>& staged);

// A tensor every rank of a group holds a different one of (an MoE layer's experts under ep).
struct NamedTensor {
  std::string name;
  Tensor value;
};
// Every rank's name of the group, in group-rank order, on every rank.
std::vector<std::string> gather_names(const distributed::Communicator& group, const std::string& name);
// Every rank's (name, value) of the group, in group-rank order, on every rank.
std::vector<NamedTensor> gather_named(const distributed::Communicator& group, const std::string& name,
                                      const Tensor& value);
// Copies a located tensor of `file` into `into` (any device), transposing as stored.
void copy_into(Tensor& into, const checkpoint::SafetensorsFile& file, const checkpoint::StoredTensor& stored);
// Where each of `tensors` is in `file`, checked against what the model expects (shapes only are
// read from the tensors); `elsewhere`: tensors other ranks load, expected in the file too.
std::vector<checkpoint::StoredTensor> locate_all(const checkpoint::SafetensorsFile& file,
                                                 const std::vector<std::pair<std::string, Tensor*>>& tensors,
                                                 checkpoint::NameStyle style, std::vector<std::string>& earlier,
                                                 const std::vector<std::pair<std::string, const Tensor*>>& elsewhere);
void report_earlier_layout(const std::filesystem::path& dir, const std::vector<std::string>& parameters,
                           const std::vector<std::string>& moments);

}  // namespace plexus::checkpoint_io
