// Megatron-LM's GPT pretraining samples over one indexed dataset (megatron.core.datasets:
// GPTDataset and helpers.cpp's build_sample_idx), index for index, so that a Megatron data
// config trains on the same token ids here.
//
// A split owns a contiguous range of the dataset's sequences (blended_dataset.hpp cuts it). Its
// tokens per epoch are the sum of those sequences' lengths; asked for N samples of S tokens, it
// takes the fewest epochs E whose tokens reach N * S + 1.
//   document index  the range's sequence ids, E copies, shuffled by numpy's RandomState(seed);
//                   when E > 1 and the last epoch would supply fewer than 80% of an epoch's
//                   samples, the first E - 1 epochs and the last are shuffled apart, so the
//                   partial epoch is not spread thinly over the whole run.
//   sample index    the documents of the document index laid end to end and cut every S tokens:
//                   sample k is (position in the document index, token offset) of its start.
//                   A sample holds S + 1 tokens (inputs and the targets shifted by one), so
//                   consecutive samples share one token; a tail shorter than that is dropped.
//                   Samples run across document boundaries.
//   shuffle index   the order samples are served in: a permutation by the same RandomState
//                   (the first E - 1 epochs' samples and the last epoch's apart, as above).
// The three arrays are cached as .npy files (numpy.load reads them) in the cache directory, under
// the hash of a description that names the dataset (its path, sizes and a checksum of its
// sequence lengths), the split's range, the sample count, S and the seed; a cache whose
// description differs is not used, so a dataset rewritten in place is never read through a
// stale index.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {

// Megatron's Split: the order of the split string's three numbers.
enum class Split : uint8_t { train = 0, valid = 1, test = 2 };
const char* split_name(Split split) noexcept;

struct GptIndexParams {
  uint64_t first_sequence = 0, end_sequence = 0;  // the split's sequences [first, end)
  std::optional<uint64_t> num_samples;            // none: exactly one epoch
  uint32_t seq_length = 0;                        // S, >= 1
  uint32_t seed = 0;                              // numpy.random.RandomState(seed)
};

struct GptIndices {
  std::vector<int32_t> document_index;  // sequence ids
  std::vector<int64_t> sample_index;    // [samples + 1, 2], row-major
  std::vector<int64_t> shuffle_index;   // [samples]
};

// The three indices for sequence_lengths (the whole dataset's, by sequence id). Throws
// std::invalid_argument when the range holds fewer than 2 tokens (no sample can be cut).
GptIndices build_gpt_indices(std::span<const int32_t> sequence_lengths, const GptIndexParams& params);

class GptDataset {
 public:
  // Builds the indices, or maps them from cache_dir when a cache with the same description is
  // there; writes them there after building (an empty cache_dir: neither). A cache directory
  // that cannot be written is reported once as a warning and the run goes on uncached.
  GptDataset(std::shared_ptr<const IndexedDataset> dataset, Split split, const GptIndexParams& params,
             const std::filesystem::path& cache_dir);
  ~GptDataset();
  GptDataset(GptDataset&&) noexcept;
  GptDataset& operator=(GptDataset&&) noexcept;

  const IndexedDataset& dataset() const noexcept { return *dataset_; }
  Split split() const noexcept { return split_; }
  const GptIndexParams& params() const noexcept { return params_; }
  uint64_t size() const noexcept;  // samples
  uint64_t epochs() const noexcept { return epochs_; }
  bool from_cache() const noexcept { return from_cache_; }
  const std::string& description() const noexcept { return description_; }

  // Sample i (0 <= i < size()) in serving order: its seq_length + 1 token ids.
  void sample(uint64_t i, std::span<int64_t> out) const;

 private:
  struct Indices;
  std::shared_ptr<const IndexedDataset> dataset_;
  Split split_;
  GptIndexParams params_;
  std::string description_;
  uint64_t epochs_ = 1;
  bool from_cache_ = false;
  std::unique_ptr<Indices> indices_;
};

// FNV-1a, 64 bits: the cache files' names and the dataset checksum in their descriptions.
uint64_t fnv1a64(std::span<const std::byte> bytes, uint64_t hash = 0xcbf29ce484222325ULL) noexcept;

}  // namespace plexus::data
