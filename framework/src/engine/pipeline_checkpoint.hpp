// A checkpoint of a pipelined model is one set of files, whatever pp is (docs/distributed.md):
// world rank 0, on the first stage, writes every stage's tensors in the whole model's order. Each
// later stage's rank in rank 0's pp group sends it the list of its tensors (stored name, shape,
// chunk) and then each tensor's bytes as its fill produces them; rank 0 merges the lists by
// chunk and receives the bytes as the writer reaches them. The other ranks of a stage run their
// fills for the collectives (gathers of sharded values and experts) and send nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/distributed/communicator.hpp"

namespace plexus {

// One file's entries with the model chunk each belongs to.
struct ChunkedEntries {
  std::vector<checkpoint::TensorData> tensors;
  std::vector<uint32_t> chunks;
};

// On a stage's sender (a later stage's rank in the writer's pp group): sends the lists of both
// files to pp rank 0 and makes every fill send its bytes there too, in the order the fills run.
void send_to_writer(const distributed::Communicator& pp, ChunkedEntries& model, ChunkedEntries& optimizer);
// On the writer (pp rank 0): adds every later stage's entries, whose fills receive their bytes,
// and orders each file's entries by chunk (a stage's own order kept within a chunk).
void merge_from_stages(const distributed::Communicator& pp, ChunkedEntries& model, ChunkedEntries& optimizer);

}  // namespace plexus
