#include "engine/mimo/mimo_data.hpp"

#include <stdexcept>
#include <string>

namespace plexus {

MimoData::MimoData(const std::filesystem::path& prefix, uint64_t seed) : dataset_(prefix), seed_(seed) {}

// The training samples in an order of the seed and the epoch.
const std::vector<int64_t>& MimoData::epoch_order(int64_t epoch) {
  if (const auto it = orders_.find(epoch); it != orders_.end()) return it->second;
  if (orders_.size() > 2) orders_.erase(orders_.begin());
  return orders_
      .emplace(epoch, data::seeded_permutation(manifest().train_samples,
                                               seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch)))
      .first->second;
}

std::vector<int64_t> MimoData::train_samples(int64_t index, int64_t rows, int64_t first, int64_t count) {
  const int64_t n = manifest().train_samples;
  std::vector<int64_t> out;
  for (int64_t r = first; r < first + count; ++r) {
    const int64_t g = index * rows + r;
    out.push_back(epoch_order(g / n)[static_cast<std::size_t>(g % n)]);
  }
  return out;
}

int64_t MimoData::valid_batches(int64_t rows) const {
  return (manifest().samples - manifest().train_samples) / rows;
}

std::vector<int64_t> MimoData::valid_samples(int64_t index, int64_t rows, int64_t first,
                                             int64_t count) const {
  std::vector<int64_t> out;
  for (int64_t r = first; r < first + count; ++r) out.push_back(manifest().train_samples + index * rows + r);
  return out;
}

Batch MimoData::language_batch(const std::vector<int64_t>& samples) const {
  const auto n = static_cast<int64_t>(samples.size());
  int64_t length = -1;
  Batch batch;
  for (int64_t i = 0; i < n; ++i) {
    const auto sample = static_cast<std::size_t>(samples[static_cast<std::size_t>(i)]);
    dataset_.check_pairing(sample);
    const std::vector<int32_t> tokens = dataset_.tokens(sample);
    if (length < 0) {
      length = static_cast<int64_t>(tokens.size()) - 1;
      if (length < 1)
        throw std::runtime_error(dataset_.prefix().string() + ": sample " + std::to_string(sample) +
                                 " has fewer than 2 tokens");
      batch.tokens = Tensor({n, length}, plx_dtype_i32());
      batch.targets = Tensor({n, length}, plx_dtype_i32());
    } else if (static_cast<int64_t>(tokens.size()) != length + 1) {
      throw std::runtime_error(dataset_.prefix().string() + ": sample " + std::to_string(sample) + " has " +
                               std::to_string(tokens.size()) + " tokens, the others " +
                               std::to_string(length + 1) + ": a batch needs sequences of one length");
    }
    int32_t* in = batch.tokens.data<int32_t>() + i * length;
    int32_t* out = batch.targets.data<int32_t>() + i * length;
    for (int64_t t = 0; t < length; ++t) {
      in[t] = tokens[static_cast<std::size_t>(t)];
      const int32_t next = tokens[static_cast<std::size_t>(t + 1)];
      out[t] = next == manifest().special_token ? -1 : next;
    }
  }
  return batch;
}

int32_t MimoData::answer(int64_t sample) const {
  const std::vector<int32_t> tokens = dataset_.tokens(static_cast<std::size_t>(sample));
  const int64_t at = manifest().answer_position;
  if (at < 0 || at >= static_cast<int64_t>(tokens.size()))
    throw std::runtime_error(dataset_.prefix().string() + ": sample " + std::to_string(sample) + " has " +
                             std::to_string(tokens.size()) + " tokens, no answer at position " +
                             std::to_string(at));
  return tokens[static_cast<std::size_t>(at)];
}

Batch MimoData::encoder_batch(const std::vector<int64_t>& samples, int64_t patch_size) const {
  const data::MultimodalManifest& m = manifest();
  if (patch_size < 1 || m.height % patch_size != 0 || m.width % patch_size != 0)
    throw std::runtime_error("patch_size " + std::to_string(patch_size) + " does not divide the " +
                             std::to_string(m.height) + "x" + std::to_string(m.width) + " images of " +
                             dataset_.prefix().string());
  const int64_t rows = m.height / patch_size, columns = m.width / patch_size, patches = rows * columns;
  const int64_t patch_dim = m.channels * patch_size * patch_size;
  const auto n = static_cast<int64_t>(samples.size());
  Batch batch;
  batch.tokens = Tensor({n, patches, patch_dim}, plx_dtype_f32());
  float* out = batch.tokens.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const std::span<const float> image =
        dataset_.pixels(static_cast<std::size_t>(samples[static_cast<std::size_t>(i)]));
    for (int64_t pr = 0; pr < rows; ++pr)
      for (int64_t pc = 0; pc < columns; ++pc)
        for (int64_t c = 0; c < m.channels; ++c)
          for (int64_t y = 0; y < patch_size; ++y)
            for (int64_t x = 0; x < patch_size; ++x) {
              const int64_t pixel = (c * m.height + pr * patch_size + y) * m.width + pc * patch_size + x;
              *out++ = image[static_cast<std::size_t>(pixel)];
            }
  }
  return batch;
}

}  // namespace plexus
