// What a MIMO step reads from a multimodal dataset (plexus/core/data/multimodal_dataset.hpp):
// the samples of each microbatch of the global batch, in one order every rank computes alike
// (so each module's lanes take exactly the samples the other modules' lanes take, by
// construction), the language model's tokens and targets of some of them, and an encoder's
// input, the images cut into patches.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <vector>

#include "plexus/core/data/multimodal_dataset.hpp"
#include "plexus/core/engine/model.hpp"

namespace plexus {

class MimoData {
 public:
  MimoData(const std::filesystem::path& prefix, uint64_t seed);

  const data::MultimodalManifest& manifest() const noexcept { return dataset_.manifest(); }
  // The samples of rows [first, first + count) of training microbatch `index` (0-based over the
  // run: step * microbatches + k) of `rows` rows: one epoch is the training samples in an order
  // shuffled by the seed and the epoch; epochs follow each other.
  std::vector<int64_t> train_samples(int64_t index, int64_t rows, int64_t first, int64_t count);
  // The held-out samples of rows [first, first + count) of validation microbatch `index`.
  std::vector<int64_t> valid_samples(int64_t index, int64_t rows, int64_t first, int64_t count) const;
  // Validation microbatches of `rows` rows the held-out samples fill.
  int64_t valid_batches(int64_t rows) const;

  // The language model's batch of these samples: tokens [n, L - 1] and the next tokens as
  // targets, ignored (-1) where the next token is the special token (the image's places), as
  // Megatron's labels are -100 at image tokens. Checks every sample's pairing.
  Batch language_batch(const std::vector<int64_t>& samples) const;
  // The token at manifest().answer_position of a sample: what its accuracy asks for.
  int32_t answer(int64_t sample) const;
  // An encoder's batch: the images cut into patch_size x patch_size patches, float32 [n, P,
  // channels * patch_size^2], each patch's pixels in (channel, row, column) order, patches in
  // row-major order (a Conv2d's with kernel = stride = patch_size).
  Batch encoder_batch(const std::vector<int64_t>& samples, int64_t patch_size) const;

 private:
  const std::vector<int64_t>& epoch_order(int64_t epoch);

  data::MultimodalDataset dataset_;
  uint64_t seed_;
  std::map<int64_t, std::vector<int64_t>> orders_;  // by epoch, the few in use
};

}  // namespace plexus
