// The trainer's data: Megatron indexed datasets sampled as Megatron samples them (data.path's
// blend, data.split; blended_dataset.hpp), and the tokenizer of data.tokenizer for the text
// samples. Before the first step it checks that the
// tokenizer, the dataset's ids and model.vocab_size agree (vocabulary_check below), and that
// data.tokenizer is the tokenizer the dataset was prepared with (tokenizer_fingerprint.hpp).
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>

#include "plexus/core/config.hpp"
#include "plexus/core/data/blended_dataset.hpp"
#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/core/data/tokenizer.hpp"
#include "plexus/core/data/tokenizer_fingerprint.hpp"
#include "plexus/core/engine/trainer.hpp"
#include "plexus/core/logging.hpp"

namespace plexus {
namespace {

// Larger datasets are not scanned for their largest id at every start: 2 GiB is about 1G uint16
// tokens, a few seconds from the page cache, and a cold read of many GB would take minutes. The
// data source still refuses any id >= model.vocab_size, naming it and its offset, when a batch
// holds one.
constexpr uint64_t kScanLimitBytes = uint64_t{2} << 30;

std::filesystem::path tokenizer_sidecar(const std::string& prefix) {
  return prefix + ".tokenizer.json";
}

// The samples of one split into a batch's int32 inputs and targets (the sample shifted by one),
// each id checked against model.vocab_size.
void fill_rows(const data::SplitSamples& samples, uint64_t first, Batch& batch, int64_t vocab_size,
               const std::function<uint64_t(uint64_t)>& index_of) {
  const auto rows = static_cast<uint64_t>(batch.tokens.shape()[0]);
  const auto seq = static_cast<std::size_t>(batch.tokens.shape()[1]);
  std::vector<int64_t> sample(seq + 1);
  int32_t* inputs = batch.tokens.data<int32_t>();
  int32_t* targets = batch.targets.data<int32_t>();
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t index = index_of(first + r);
    samples.sample(index, sample);
    for (std::size_t t = 0; t <= seq; ++t)
      if (sample[t] < 0 || (vocab_size > 0 && sample[t] >= vocab_size))
        throw DataError(samples.datasets().front().dataset().prefix().string(),
                        "sample " + std::to_string(index) + " holds the token id " +
                            std::to_string(sample[t]) + ", outside the vocabulary [0, " +
                            std::to_string(vocab_size) + ") of model.vocab_size");
    for (std::size_t t = 0; t < seq; ++t) {
      inputs[r * seq + t] = static_cast<int32_t>(sample[t]);
      targets[r * seq + t] = static_cast<int32_t>(sample[t + 1]);
    }
  }
}

class IndexedDataSource final : public DataSource {
 public:
  IndexedDataSource(std::array<std::unique_ptr<data::SplitSamples>, 3> splits, int64_t vocab_size,
                    std::unique_ptr<data::Tokenizer> tokenizer, bool ids_only)
      : splits_(std::move(splits)),
        vocab_size_(vocab_size),
        tokenizer_(std::move(tokenizer)),
        ids_only_(ids_only) {}

  void train_batch(uint64_t position, Batch& batch) override {
    const data::SplitSamples& train = *splits_[0];
    fill_rows(train, position, batch, vocab_size_, [&](uint64_t i) {
      if (i >= train.size())
        throw std::out_of_range("training sample " + std::to_string(i) +
                                " asked for; the training split was built "
                                "with " +
                                std::to_string(train.size()) + " (train.steps x the global batch)");
      return i;
    });
  }

  void validation_batch(uint64_t index, Batch& batch) override {
    // Every evaluation reads the same samples: the first eval_iters microbatches of the split.
    const data::SplitSamples& valid = *splits_[1];
    const auto rows = static_cast<uint64_t>(batch.tokens.shape()[0]);
    fill_rows(valid, index * rows, batch, vocab_size_, [&](uint64_t i) { return i % valid.size(); });
  }

  // The prompt's tokens that the model has rows for (the byte tokenizer's 0..255 may exceed
  // a small model.vocab_size).
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> tokens = tokenizer_->encode(text);
    std::erase_if(tokens, [&](int32_t t) { return vocab_size_ > 0 && t >= vocab_size_; });
    return tokens;
  }

  std::string decode(const std::vector<int32_t>& tokens) const override {
    if (!ids_only_) return tokenizer_->decode_for_display(tokens);
    std::string text = "[token ids: the dataset is not byte-level; set data.tokenizer to see text]";
    for (const int32_t token : tokens) text += ' ' + std::to_string(token);
    return text;
  }

 private:
  std::array<std::unique_ptr<data::SplitSamples>, 3> splits_;
  int64_t vocab_size_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  bool ids_only_;
};

// The dataset's smallest and largest id, unless its dtype already keeps them in [0, bound) or
// the dataset is too large to scan at every start.
std::optional<data::TokenView::IdRange> ids_to_check(const data::IndexedDataset& dataset, int64_t bound) {
  if (data::dtype_min(dataset.dtype()) >= 0 && data::dtype_max(dataset.dtype()) < bound) return std::nullopt;
  const uint64_t bytes = dataset.token_count() * data::dtype_size(dataset.dtype());
  if (bytes > kScanLimitBytes) {
    log_info(
        "data",
        dataset.prefix().string() + ".bin is " + std::to_string(bytes >> 20) +
            " MiB: its token ids are checked against model.vocab_size as batches are read, not all at start");
    return std::nullopt;
  }
  return dataset.tokens().id_range();
}

// Whether the tokenizer, the dataset's ids and model.vocab_size agree; a ConfigError naming
// the keys, the files and the numbers when they do not. Returns whether the dataset's ids go
// beyond what the byte tokenizer can show as text.
bool vocabulary_check(const data::IndexedDataset& dataset, const data::Tokenizer& tokenizer,
                      const std::string& tokenizer_file, int64_t model_vocab) {
  const std::string path = dataset.prefix().string();
  const std::string vocab_text = "model.vocab_size is " + std::to_string(model_vocab);
  if (!tokenizer_file.empty() && tokenizer.vocab_size() > model_vocab)
    throw config::ConfigError(
        "model.vocab_size", vocab_text + ", but the tokenizer data.tokenizer = " + tokenizer_file + " has " +
                                std::to_string(tokenizer.vocab_size()) +
                                " tokens: set model.vocab_size to at least that (a multiple of "
                                "64 above it, e.g. 50304 for GPT-2's 50257, is faster)");
  const int64_t limit = tokenizer_file.empty() ? model_vocab : std::min(model_vocab, tokenizer.vocab_size());
  // With the byte tokenizer, whether ids go beyond 255 matters too.
  const auto range = ids_to_check(
      dataset, tokenizer_file.empty() ? std::min<int64_t>(limit, data::ByteTokenizer::kVocabSize) : limit);
  if (!range || range->min > range->max) return false;
  if (range->min < 0)
    throw config::ConfigError("data.path", path + " holds the token id " + std::to_string(range->min) +
                                               ": token ids are never negative");
  const std::string holds = path + " holds token ids up to " + std::to_string(range->max);
  std::error_code ec;
  const bool has_sidecar = std::filesystem::exists(tokenizer_sidecar(path), ec);
  const std::string hint = has_sidecar ? " (" + tokenizer_sidecar(path).string() +
                                             ", beside it, is the tokenizer it was prepared with)"
                                       : "";
  if (range->max >= model_vocab)
    throw config::ConfigError(
        "model.vocab_size", vocab_text + ", but data.path = " + holds + ": set model.vocab_size above " +
                                std::to_string(range->max) +
                                " (the vocabulary of the tokenizer the data was prepared with" + hint + ")");
  if (!tokenizer_file.empty() && range->max >= tokenizer.vocab_size())
    throw config::ConfigError("data.tokenizer",
                              tokenizer_file + " has " + std::to_string(tokenizer.vocab_size()) +
                                  " tokens, but data.path = " + holds +
                                  ": the dataset was prepared with another tokenizer" + hint);
  if (tokenizer_file.empty() && range->max >= data::ByteTokenizer::kVocabSize) {
    log_warn("data",
             holds +
                 ", beyond the byte tokenizer's 0..255: text samples show token ids; set data.tokenizer "
                 "to the tokenizer.json the data was prepared with" +
                 hint);
    return true;
  }
  return false;
}

}  // namespace

namespace {

// Megatron's get_blend_from_list: an even-length list whose even entries are all numbers (or
// numeric strings) is weights and prefixes; otherwise every entry is a prefix.
data::Blend blend_of(const boost::json::value& path) {
  data::Blend blend;
  if (path.is_string()) {
    if (!path.get_string().empty()) blend.prefixes.emplace_back(path.get_string());
    return blend;
  }
  const boost::json::array& list = path.get_array();
  const auto weight_of = [](const boost::json::value& v) -> std::optional<double> {
    if (v.is_number()) return v.to_number<double>();
    if (!v.is_string()) return std::nullopt;
    const std::string_view text = v.get_string();
    double value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
    return value;
  };
  bool weighted = !list.empty() && list.size() % 2 == 0;
  for (std::size_t i = 0; weighted && i < list.size(); i += 2) weighted = weight_of(list[i]).has_value();
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string at = "data.path[" + std::to_string(i) + "]";
    if (weighted && i % 2 == 0) {
      const double w = *weight_of(list[i]);
      if (!(w > 0) || !std::isfinite(w))
        throw config::ConfigError(
            at, "a blend's weights must be positive numbers, got " + boost::json::serialize(list[i]));
      blend.weights.push_back(w);
    } else if (!list[i].is_string() || list[i].get_string().empty()) {
      throw config::ConfigError(
          at,
          "expected a dataset prefix (a string; for a weighted blend, weights and prefixes "
          "alternate: [0.3, \"a\", 0.7, \"b\"]), got " +
              (list[i].is_number() ? std::to_string(list[i].to_number<double>())
                                   : boost::json::serialize(list[i])));
    } else {
      blend.prefixes.emplace_back(list[i].get_string());
    }
  }
  return blend;
}

int64_t int_at(const boost::json::value& rc, const char* section, const char* key) {
  return rc.at(section).at(key).to_number<int64_t>();
}

}  // namespace

data::MegatronDataConfig megatron_data_config(const boost::json::value& run_config,
                                              int64_t data_parallel_size) {
  const boost::json::object& d = run_config.at("data").as_object();
  data::MegatronDataConfig config;
  config.blend = blend_of(d.at("path"));
  if (config.blend.prefixes.empty())
    throw config::ConfigError("data.path",
                              "no dataset given: prepare one with `plexus data prepare --input FILES "
                              "--output-prefix PREFIX` and set data.path to PREFIX");
  const boost::json::value& split = d.at("split");
  if (!split.is_string()) {
    const double train = split.to_number<double>();
    throw config::ConfigError("data.split",
                              "expected Megatron's split string of train, validation and test shares, e.g. "
                              "\"969,30,1\"; a training fraction of " +
                                  std::to_string(train) + " is \"" +
                                  std::to_string(std::lround(train * 1000)) + "," +
                                  std::to_string(1000 - std::lround(train * 1000)) + ",0\"");
  }
  try {
    config.split = data::parse_split(split.get_string());
  } catch (const std::invalid_argument& e) {
    throw config::ConfigError("data.split", e.what());
  }
  if (!config.split[1]) {
    // A lone fraction was this key's meaning before it was Megatron's split string.
    std::string hint;
    double fraction = 0;
    const std::string_view text = split.get_string();
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), fraction);
    if (ec == std::errc() && ptr == text.data() + text.size() && fraction > 0 && fraction < 1)
      hint = " (a training fraction of " + std::string(text) + " is \"" +
             std::to_string(std::lround(fraction * 1000)) + "," +
             std::to_string(1000 - std::lround(fraction * 1000)) + ",0\")";
    throw config::ConfigError("data.split", "\"" + std::string(text) +
                                                "\" gives validation no share, and every run evaluates "
                                                "(train.eval_iters >= 1): give it one, e.g. \"969,30,1\"" +
                                                hint);
  }
  const int64_t seed = int_at(run_config, "run", "seed");
  if (seed < 0 || seed > int64_t{0xffffffff})
    throw config::ConfigError("run.seed",
                              "the data samples are shuffled by numpy's RandomState(run.seed), as "
                              "Megatron's are: the seed must be in [0, 2^32 - 1], not " +
                                  std::to_string(seed));
  config.seed = static_cast<uint32_t>(seed);
  config.seq_length = static_cast<uint32_t>(int_at(run_config, "model", "seq_length"));
  const int64_t micro_batch = int_at(run_config, "train", "micro_batch_size");
  config.sizes[0] = static_cast<uint64_t>(int_at(run_config, "train", "steps") * micro_batch *
                                          int_at(run_config, "train", "microbatches") * data_parallel_size);
  config.sizes[1] = static_cast<uint64_t>(int_at(run_config, "train", "eval_iters") * micro_batch);
  config.build = {true, true, false};
  config.cache_dir = std::filesystem::path(std::string(d.at("cache_path").as_string()));
  return config;
}

std::unique_ptr<DataSource> make_indexed_data_source(const boost::json::value& run_config,
                                                     int64_t data_parallel_size) {
  data::MegatronDataConfig config = megatron_data_config(run_config, data_parallel_size);
  const std::string tokenizer_file(run_config.at("data").at("tokenizer").as_string());
  std::unique_ptr<data::Tokenizer> tokenizer;
  try {
    tokenizer = data::open_tokenizer(tokenizer_file);
  } catch (const DataError& e) {
    throw config::ConfigError("data.tokenizer", e.what());
  }
  const int64_t vocab_size = run_config.at("model").at("vocab_size").to_number<int64_t>();
  bool ids_only = false;
  for (const std::string& prefix : config.blend.prefixes) {
    const data::IndexedDataset dataset(prefix);
    ids_only = vocabulary_check(dataset, *tokenizer, tokenizer_file, vocab_size) || ids_only;
    // A tokenizer of the same size as the dataset's passes every check above: the fingerprint
    // that `plexus data prepare` records beside the dataset tells whether it is the same tokenizer.
    if (tokenizer_file.empty()) continue;
    try {
      const data::FingerprintCheck check =
          data::check_tokenizer_fingerprint(dataset, *tokenizer, tokenizer_file);
      if (check.outcome != data::FingerprintCheck::Outcome::matches) log_warn("data", check.warning);
    } catch (const DataError& e) {
      throw config::ConfigError("data.tokenizer", e.what());
    }
  }
  auto splits = data::build_megatron_datasets(config);
  return std::make_unique<IndexedDataSource>(std::move(splits), vocab_size, std::move(tokenizer), ids_only);
}

}  // namespace plexus
