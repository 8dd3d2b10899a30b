// The split string, the blend and the builder of blended_dataset.hpp.
#include "plexus/core/data/blended_dataset.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "plexus/core/data/numpy_random.hpp"

namespace plexus::data {

SplitMatrix parse_split(std::string_view text) {
  std::vector<double> shares;
  for (std::size_t at = 0; at < text.size();) {
    const auto is_number_char = [](char c) { return c == '.' || (c >= '0' && c <= '9'); };
    if (!is_number_char(text[at])) {
      ++at;
      continue;
    }
    std::size_t end = at;
    while (end < text.size() && is_number_char(text[end])) ++end;
    double value = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + at, text.data() + end, value);
    if (ec != std::errc() || ptr != text.data() + end)
      throw std::invalid_argument("\"" + std::string(text.substr(at, end - at)) + "\" in the split \"" +
                                  std::string(text) + "\" is not a number");
    shares.push_back(value);
    at = end;
  }
  if (shares.size() > 3)
    throw std::invalid_argument("the split \"" + std::string(text) +
                                "\" has more than three numbers (train, validation, test)");
  shares.resize(3, 0.0);
  if (numpy_sum(shares) <= 0)
    throw std::invalid_argument("the split \"" + std::string(text) +
                                "\" gives no share to any split: expected e.g. \"969,30,1\"");
  const std::vector<double> normalized = normalize_weights(shares);
  SplitMatrix matrix;
  double begin = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const double end = begin + normalized[i];
    if (end > begin) matrix[i] = SplitRange{begin, end};
    begin = end;
  }
  return matrix;
}

void build_blending_indices(std::span<const double> weights, uint64_t size,
                            std::vector<int16_t>& dataset_index, std::vector<int64_t>& dataset_sample_index) {
  dataset_index.assign(static_cast<std::size_t>(size), 0);
  dataset_sample_index.assign(static_cast<std::size_t>(size), 0);
  std::vector<int64_t> taken(weights.size(), 0);
  for (uint64_t i = 0; i < size; ++i) {
    const double at = std::max(static_cast<double>(i), 1.0);
    std::size_t pick = 0;
    double most = weights[0] * at - static_cast<double>(taken[0]);
    for (std::size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * at - static_cast<double>(taken[d]);
      if (error > most) {
        most = error;
        pick = d;
      }
    }
    dataset_index[static_cast<std::size_t>(i)] = static_cast<int16_t>(pick);
    dataset_sample_index[static_cast<std::size_t>(i)] = taken[pick]++;
  }
}

SplitSamples::SplitSamples(std::vector<GptDataset> datasets, std::vector<double> weights,
                           std::optional<uint64_t> size)
    : datasets_(std::move(datasets)) {
  if (datasets_.empty()) throw std::invalid_argument("SplitSamples: no dataset");
  if (weights.empty()) return;  // one dataset, served directly
  if (!size) throw std::invalid_argument("a blend of datasets needs the number of samples to serve");
  build_blending_indices(normalize_weights(weights), *size, dataset_index_, dataset_sample_index_);
  std::vector<uint64_t> taken(datasets_.size(), 0);
  for (const int16_t d : dataset_index_) ++taken[static_cast<std::size_t>(d)];
  for (std::size_t d = 0; d < datasets_.size(); ++d)
    if (taken[d] > datasets_[d].size())
      throw DataError(datasets_[d].dataset().prefix().string(),
                      std::string("the ") + split_name(datasets_[d].split()) + " blend takes " +
                          std::to_string(taken[d]) + " samples from " +
                          datasets_[d].dataset().prefix().string() + ", which has " +
                          std::to_string(datasets_[d].size()));
}

uint64_t SplitSamples::size() const noexcept {
  return dataset_index_.empty() ? datasets_.front().size() : dataset_index_.size();
}

void SplitSamples::sample(uint64_t i, std::span<int64_t> out) const {
  if (dataset_index_.empty()) return datasets_.front().sample(i, out);
  if (i >= dataset_index_.size())
    throw std::out_of_range("sample " + std::to_string(i) + " of a blend of " +
                            std::to_string(dataset_index_.size()));
  const auto k = static_cast<std::size_t>(i);
  datasets_[static_cast<std::size_t>(dataset_index_[k])].sample(
      static_cast<uint64_t>(dataset_sample_index_[k]), out);
}

namespace {

// Python's round() of a fraction of count: half to even, as std::nearbyint in the default mode.
uint64_t bound(double fraction, std::size_t count) {
  return static_cast<uint64_t>(std::nearbyint(fraction * static_cast<double>(count)));
}

GptDataset split_dataset(const std::shared_ptr<const IndexedDataset>& dataset, Split split,
                         const SplitRange& range, std::optional<uint64_t> samples,
                         const MegatronDataConfig& config) {
  GptIndexParams params;
  params.first_sequence = bound(range.begin, dataset->sequence_count());
  params.end_sequence = bound(range.end, dataset->sequence_count());
  params.num_samples = samples;
  params.seq_length = config.seq_length;
  params.seed = config.seed;
  std::filesystem::path cache;
  if (config.cache_dir)
    cache =
        config.cache_dir->empty() ? dataset->prefix() / "cache" / "GPTDataset_indices" : *config.cache_dir;
  try {
    return GptDataset(dataset, split, params, cache);
  } catch (const std::invalid_argument& e) {
    throw DataError(dataset->prefix().string(), "the " + std::string(split_name(split)) + " split of " +
                                                    dataset->prefix().string() + " (sequences " +
                                                    std::to_string(params.first_sequence) + " to " +
                                                    std::to_string(params.end_sequence) + "): " + e.what());
  }
}

}  // namespace

std::array<std::unique_ptr<SplitSamples>, 3> build_megatron_datasets(const MegatronDataConfig& config) {
  const Blend& blend = config.blend;
  if (blend.prefixes.empty()) throw std::invalid_argument("no dataset prefix");
  if (!blend.weights.empty() && blend.weights.size() != blend.prefixes.size())
    throw std::invalid_argument("a blend needs one weight per dataset prefix");
  if (blend.prefixes.size() > 32767) throw std::invalid_argument("a blend takes at most 32767 datasets");
  std::vector<std::shared_ptr<const IndexedDataset>> datasets;
  for (const std::string& prefix : blend.prefixes)
    datasets.push_back(std::make_shared<const IndexedDataset>(prefix));
  const std::vector<double> weights =
      blend.weights.empty() ? std::vector<double>{} : normalize_weights(blend.weights);

  std::array<std::unique_ptr<SplitSamples>, 3> out;
  for (std::size_t i = 0; i < 3; ++i) {
    if (!config.split[i] || !config.build[i]) continue;
    const auto split = static_cast<Split>(i);
    const std::optional<uint64_t> size = config.sizes[i];
    std::vector<GptDataset> parts;
    if (datasets.size() == 1 && weights.empty()) {
      parts.push_back(split_dataset(datasets[0], split, *config.split[i], size, config));
      out[i] = std::make_unique<SplitSamples>(std::move(parts), std::vector<double>{}, std::nullopt);
      continue;
    }
    if (!size)
      throw std::invalid_argument(std::string("a blend needs the ") + split_name(split) + " split's size");
    uint64_t blend_size = 0;
    for (std::size_t d = 0; d < datasets.size(); ++d) {
      std::optional<uint64_t> build;  // unweighted: one epoch of each
      if (!weights.empty()) {
        const double target = std::ceil(static_cast<double>(*size) * weights[d]);
        blend_size += static_cast<uint64_t>(target);
        build = static_cast<uint64_t>(std::ceil(target * (1 + config.surplus)));
      }
      parts.push_back(split_dataset(datasets[d], split, *config.split[i], build, config));
    }
    std::vector<double> blend_weights = weights;
    if (weights.empty()) {  // in proportion to the datasets' sizes, at most all of them
      for (const GptDataset& part : parts) {
        blend_weights.push_back(static_cast<double>(part.size()));
        blend_size += part.size();
      }
      blend_size = std::min(blend_size, *size);
    }
    out[i] = std::make_unique<SplitSamples>(std::move(parts), std::move(blend_weights), blend_size);
  }
  return out;
}

}  // namespace plexus::data
