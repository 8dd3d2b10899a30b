// The trainer's data: a Megatron indexed dataset read through the window sampler, and the
// tokenizer of data.tokenizer for the text samples. Before the first step it checks that the
// tokenizer, the dataset's ids and model.vocab_size agree (vocabulary_check below), and that
// data.tokenizer is the tokenizer the dataset was prepared with (tokenizer_fingerprint.hpp).
#include <boost/json.hpp>
#include <cstring>

#include "plexus/core/config.hpp"
#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/core/data/sampler.hpp"
#include "plexus/core/data/tokenizer.hpp"
#include "plexus/core/data/tokenizer_fingerprint.hpp"
#include "plexus/core/engine/trainer.hpp"
#include "plexus/core/logging.hpp"

namespace plexus {
namespace {

// Larger datasets are not scanned for their largest id at every start: 2 GiB is about 1G uint16
// tokens, a few seconds from the page cache, and a cold read of many GB would take minutes. The
// sampler still refuses any id >= model.vocab_size, naming it and its offset, when a batch
// holds one.
constexpr uint64_t kScanLimitBytes = uint64_t{2} << 30;

std::filesystem::path tokenizer_sidecar(const std::string& prefix) {
  return prefix + ".tokenizer.json";
}

class IndexedDataSource final : public DataSource {
 public:
  IndexedDataSource(std::shared_ptr<const data::IndexedDataset> dataset, data::WindowSamplerOptions options,
                    std::unique_ptr<data::Tokenizer> tokenizer, bool ids_only)
      : sampler_(std::move(dataset), options), tokenizer_(std::move(tokenizer)), ids_only_(ids_only) {}

  void train_batch(uint64_t position, Batch& batch) override {
    const auto rows = static_cast<std::size_t>(batch.tokens.shape()[0]);
    sampler_.batch(position, rows, span_of(batch.tokens), span_of(batch.targets));
  }

  void validation_batch(uint64_t index, Batch& batch) override {
    // Validation sets smaller than eval_iters batches wrap around rather than fail.
    const auto rows = static_cast<uint64_t>(batch.tokens.shape()[0]);
    const uint64_t windows = sampler_.validation_window_count();
    const auto seq = static_cast<std::size_t>(batch.tokens.shape()[1]);
    for (uint64_t r = 0; r < rows; ++r) {
      const uint64_t window = (index * rows + r) % windows;
      sampler_.validation_batch(window, 1, span_of(batch.tokens).subspan(r * seq, seq),
                                span_of(batch.targets).subspan(r * seq, seq));
    }
  }

  // The prompt's tokens that the model has rows for (the byte tokenizer's 0..255 may exceed
  // a small model.vocab_size).
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> tokens = tokenizer_->encode(text);
    const int64_t vocab = sampler_.options().vocab_size;
    std::erase_if(tokens, [&](int32_t t) { return vocab > 0 && t >= vocab; });
    return tokens;
  }

  std::string decode(const std::vector<int32_t>& tokens) const override {
    if (!ids_only_) return tokenizer_->decode_for_display(tokens);
    std::string text = "[token ids: the dataset is not byte-level; set data.tokenizer to see text]";
    for (const int32_t token : tokens) text += ' ' + std::to_string(token);
    return text;
  }

 private:
  static std::span<int32_t> span_of(Tensor& t) {
    return {t.data<int32_t>(), static_cast<std::size_t>(t.numel())};
  }
  data::WindowSampler sampler_;
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

std::unique_ptr<DataSource> make_indexed_data_source(const boost::json::value& run_config) {
  const std::string path(run_config.at("data").at("path").as_string());
  if (path.empty())
    throw config::ConfigError("data.path",
                              "no dataset given: prepare one with `plexus data prepare --input FILES "
                              "--output-prefix PREFIX` and set data.path to PREFIX");
  const std::string tokenizer_file(run_config.at("data").at("tokenizer").as_string());
  std::unique_ptr<data::Tokenizer> tokenizer;
  try {
    tokenizer = data::open_tokenizer(tokenizer_file);
  } catch (const DataError& e) {
    throw config::ConfigError("data.tokenizer", e.what());
  }
  data::WindowSamplerOptions options;
  options.seq_length = static_cast<std::size_t>(run_config.at("model").at("seq_length").to_number<int64_t>());
  options.split = run_config.at("data").at("split").to_number<double>();
  options.seed = static_cast<uint64_t>(run_config.at("run").at("seed").to_number<int64_t>());
  options.vocab_size = run_config.at("model").at("vocab_size").to_number<int64_t>();
  auto dataset = std::make_shared<const data::IndexedDataset>(path);
  const bool ids_only = vocabulary_check(*dataset, *tokenizer, tokenizer_file, options.vocab_size);
  // A tokenizer of the same size as the dataset's passes every check above: the fingerprint that
  // `plexus data prepare` records beside the dataset tells whether it is the same tokenizer.
  if (!tokenizer_file.empty()) {
    try {
      const data::FingerprintCheck check =
          data::check_tokenizer_fingerprint(*dataset, *tokenizer, tokenizer_file);
      if (check.outcome != data::FingerprintCheck::Outcome::matches) log_warn("data", check.warning);
    } catch (const DataError& e) {
      throw config::ConfigError("data.tokenizer", e.what());
    }
  }
  return std::make_unique<IndexedDataSource>(std::move(dataset), options, std::move(tokenizer), ids_only);
}

}  // namespace plexus
