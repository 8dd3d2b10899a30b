// Megatron-LM's data config, read as Megatron reads it (megatron.core.datasets:
// BlendedMegatronDatasetBuilder, BlendedDataset, parse_and_normalize_split, get_blend_from_list):
//
//   blend   one dataset prefix, or several with weights ([0.3, "a", 0.7, "b"]: 30% of the samples
//           from a, 70% from b) or without (each contributes one epoch, in proportion to its size);
//   split   "969,30,1": the train, validation and test shares of every dataset's sequences, as
//           contiguous ranges in file order (round half to even at the bounds, as Python's round);
//   sizes   the samples each split must serve (the trainer's train.steps x global batch, ...).
//
// One prefix without weights is a GptDataset per split. Otherwise each dataset is built for its
// weight's share of the size plus 0.5% (Megatron's mid_level_dataset_surplus), and a blend picks,
// for each sample in turn, the dataset furthest behind its share (helpers.cpp
// build_blending_indices), so any prefix of the blend holds the datasets in their proportions.
// The blend's indices are built in memory: at 10 bytes a sample they are cheap next to the
// GptDatasets' cached ones.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plexus/core/data/gpt_dataset.hpp"

namespace plexus::data {

struct SplitRange {
  double begin = 0, end = 0;  // fractions of a dataset's sequences
};
// Per split (train, valid, test): its range, or none for an empty share.
using SplitMatrix = std::array<std::optional<SplitRange>, 3>;

// "969,30,1" (the numbers' runs of digits and dots; missing ones are 0) normalized to fractions
// and laid end to end. Throws std::invalid_argument: a number that does not parse, more than three,
// a negative one or all zero.
SplitMatrix parse_split(std::string_view text);

struct Blend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // empty: unweighted; else one > 0 per prefix
};

// helpers.cpp build_blending_indices: for each of `size` samples, the dataset (the first of equal
// ones) whose share weight * max(i, 1) exceeds its count the most, and that dataset's next sample.
void build_blending_indices(std::span<const double> weights, uint64_t size,
                            std::vector<int16_t>& dataset_index, std::vector<int64_t>& dataset_sample_index);

// The samples of one split: one dataset's, or a blend's.
class SplitSamples {
 public:
  SplitSamples(std::vector<GptDataset> datasets, std::vector<double> weights, std::optional<uint64_t> size);
  uint64_t size() const noexcept;
  const std::vector<GptDataset>& datasets() const noexcept { return datasets_; }
  // Sample i's seq_length + 1 token ids.
  void sample(uint64_t i, std::span<int64_t> out) const;

 private:
  std::vector<GptDataset> datasets_;
  std::vector<int16_t> dataset_index_;  // empty: the one dataset, directly
  std::vector<int64_t> dataset_sample_index_;
};

struct MegatronDataConfig {
  Blend blend;
  SplitMatrix split;
  std::array<std::optional<uint64_t>, 3> sizes;    // samples per split; none: one epoch
  std::array<bool, 3> build = {true, true, true};  // false: that split is not built (null)
  uint32_t seq_length = 0;
  uint32_t seed = 0;
  // Where GptDatasets cache their indices: none, no cache; an empty path, beside each dataset as
  // Megatron does without --data-cache-path (PREFIX/cache/GPTDataset_indices); else that folder.
  std::optional<std::filesystem::path> cache_dir;
  double surplus = 0.005;  // Megatron's mid_level_dataset_surplus
};

// BlendedMegatronDatasetBuilder.build for GPT: each split's samples, null for a split without a
// share. Datasets are opened once and shared by the splits. Throws DataError naming a dataset
// (unreadable, or a split of it too small for one sample) or std::invalid_argument.
std::array<std::unique_ptr<SplitSamples>, 3> build_megatron_datasets(const MegatronDataConfig& config);

}  // namespace plexus::data
