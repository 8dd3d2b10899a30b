// The document, sample and shuffle indices of Megatron's GPTDataset (gpt_dataset.hpp), in the
// order Megatron draws them from one RandomState: document index shuffle(s) first, then the
// shuffle index.
#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "plexus/core/data/gpt_dataset.hpp"
#include "plexus/core/data/numpy_random.hpp"

namespace plexus::data {
namespace {

// _build_document_index: `epochs` copies of the split's sequence ids, shuffled as one array;
// with separate_final_epoch, the first epochs - 1 copies and the last shuffled apart.
std::vector<int32_t> document_index(const GptIndexParams& p, uint64_t epochs, NumpyRandomState& random,
                                    bool separate_final_epoch) {
  if (separate_final_epoch && epochs > 1) {
    std::vector<int32_t> first = document_index(p, epochs - 1, random, false);
    const std::vector<int32_t> last = document_index(p, 1, random, false);
    first.insert(first.end(), last.begin(), last.end());
    return first;
  }
  const uint64_t count = p.end_sequence - p.first_sequence;
  std::vector<int32_t> index(static_cast<std::size_t>(count * epochs));
  for (uint64_t e = 0; e < epochs; ++e)
    std::iota(index.begin() + static_cast<std::ptrdiff_t>(e * count),
              index.begin() + static_cast<std::ptrdiff_t>((e + 1) * count),
              static_cast<int32_t>(p.first_sequence));
  random.shuffle(std::span<int32_t>(index));
  return index;
}

// helpers.cpp build_sample_idx with drop_last_partial_sequence and add_extra_token_to_sequence:
// the documents laid end to end, cut every seq_length tokens, each sample one token longer.
std::vector<int64_t> sample_index(std::span<const int32_t> lengths, std::span<const int32_t> documents,
                                  uint32_t seq_length, uint64_t samples) {
  std::vector<int64_t> index;
  index.reserve(static_cast<std::size_t>(2 * (samples + 1)));
  int64_t position = 0, offset = 0;
  index.push_back(position);
  index.push_back(offset);
  for (uint64_t k = 1; k <= samples; ++k) {
    int64_t remaining = int64_t{seq_length} + 1;
    while (remaining != 0) {
      const int64_t length =
          lengths[static_cast<std::size_t>(documents[static_cast<std::size_t>(position)])] - offset;
      remaining -= length;
      if (remaining <= 0) {
        offset += remaining + length - 1;
        remaining = 0;
      } else if (position == static_cast<int64_t>(documents.size()) - 1) {
        // The last document ends the last sample (samples was sized so that it fits).
        offset = lengths[static_cast<std::size_t>(documents[static_cast<std::size_t>(position)])] - 1;
        break;
      } else {
        ++position;
        offset = 0;
      }
    }
    index.push_back(position);
    index.push_back(offset);
  }
  return index;
}

// _build_shuffle_index: [0, first) shuffled, then [first, total) shuffled apart.
std::vector<int64_t> shuffle_index(uint64_t first, uint64_t total, NumpyRandomState& random) {
  std::vector<int64_t> index(static_cast<std::size_t>(total));
  std::iota(index.begin(), index.end(), int64_t{0});
  random.shuffle(std::span<int64_t>(index.data(), static_cast<std::size_t>(first)));
  if (first < total)
    random.shuffle(std::span<int64_t>(index.data() + first, static_cast<std::size_t>(total - first)));
  return index;
}

}  // namespace

GptIndices build_gpt_indices(std::span<const int32_t> lengths, const GptIndexParams& p) {
  if (p.seq_length < 1) throw std::invalid_argument("the sequence length must be at least 1");
  if (p.first_sequence > p.end_sequence || p.end_sequence > lengths.size())
    throw std::invalid_argument("sequences [" + std::to_string(p.first_sequence) + ", " +
                                std::to_string(p.end_sequence) + ") are not in a dataset of " +
                                std::to_string(lengths.size()));
  uint64_t tokens_per_epoch = 0;
  for (uint64_t s = p.first_sequence; s < p.end_sequence; ++s)
    tokens_per_epoch += static_cast<uint64_t>(lengths[s]);
  const uint64_t seq = p.seq_length;
  if (tokens_per_epoch < seq + 1)
    throw std::invalid_argument(std::to_string(p.end_sequence - p.first_sequence) + " sequences of " +
                                std::to_string(tokens_per_epoch) +
                                " tokens in all: fewer than one sample of " + std::to_string(seq + 1) +
                                " tokens (seq_length + 1)");

  // _get_num_epochs: the fewest epochs whose tokens cover the samples asked for.
  uint64_t epochs = 1;
  if (p.num_samples)
    for (uint64_t tokens = tokens_per_epoch; tokens < *p.num_samples * seq + 1; tokens += tokens_per_epoch)
      ++epochs;

  bool separate_final_epoch = false;
  uint64_t samples_before_final_epoch = 0;
  if (epochs > 1) {
    samples_before_final_epoch = ((epochs - 1) * tokens_per_epoch - 1) / seq;
    const uint64_t from_final_epoch = *p.num_samples - samples_before_final_epoch;
    const uint64_t per_epoch = (tokens_per_epoch - 1) / seq;
    separate_final_epoch = from_final_epoch < static_cast<uint64_t>(0.80 * static_cast<double>(per_epoch));
  }

  NumpyRandomState random(p.seed);
  GptIndices out;
  out.document_index = document_index(p, epochs, random, separate_final_epoch);
  const uint64_t samples = (epochs * tokens_per_epoch - 1) / seq;
  out.sample_index = sample_index(lengths, out.document_index, p.seq_length, samples);
  out.shuffle_index =
      shuffle_index(separate_final_epoch ? samples_before_final_epoch : samples, samples, random);
  return out;
}

}  // namespace plexus::data
