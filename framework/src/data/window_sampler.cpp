// WindowSampler: GPT-pretraining windows over a token dataset's stream; see sampler.hpp for
// the split, window and shuffle rules.
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "plexus/core/data/sampler.hpp"

namespace plexus::data {
namespace {

// The splitmix64 output function (Steele, Lea, Flood 2014).
uint64_t mix64(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string percent(double fraction) {
  std::ostringstream os;
  os << fraction * 100.0 << "%";
  return os.str();
}

}  // namespace

uint64_t bounded_random(std::mt19937_64& engine, uint64_t bound) {
  if (bound == 0) throw std::invalid_argument("bounded_random: the bound must be positive");
  // 2^64 mod bound: the lowest draws, rejected so the accepted range is a multiple of bound.
  const uint64_t threshold = (uint64_t{0} - bound) % bound;
  for (;;) {
    const uint64_t draw = static_cast<uint64_t>(engine());  // mt19937_64: all 64 bits random
    if (draw >= threshold) return draw % bound;
  }
}

uint64_t epoch_seed(uint64_t seed, uint64_t epoch) noexcept { return mix64(seed ^ mix64(epoch)); }

WindowSampler::WindowSampler(std::shared_ptr<const IndexedDataset> dataset, WindowSamplerOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  if (!dataset_) throw std::invalid_argument("WindowSampler: no dataset");
  const std::string name = dataset_->prefix().string();
  const auto fail = [&](const std::string& message) { throw DataError(name, "dataset " + name + ": " + message); };
  if (options_.seq_length == 0) fail("seq_length must be at least 1");
  if (!std::isfinite(options_.split) || options_.split <= 0.0 || options_.split > 1.0)
    fail("the train/validation split must be a fraction in (0, 1], not " + std::to_string(options_.split));

  const uint64_t total = dataset_->token_count();
  const uint64_t seq = options_.seq_length;
  const uint64_t window = seq + 1;
  uint64_t train_end = total;
  if (options_.split < 1.0)
    train_end = std::min(total, static_cast<uint64_t>(std::floor(options_.split * static_cast<double>(total))));
  train_ = {0, train_end};
  validation_ = {train_end, total};

  const std::string shape = "one window of seq_length + 1 = " + std::to_string(window) + " tokens (seq_length " +
                            std::to_string(seq) + ")";
  if (train_.size() < window)
    fail("the training split (the first " + percent(options_.split) + " of its " + std::to_string(total) +
         " tokens: " + std::to_string(train_.size()) + ") is shorter than " + shape +
         "; use more data, a shorter seq_length or a larger split");
  train_windows_ = (train_.size() - 1) / seq;
  if (options_.split < 1.0) {
    if (validation_.size() < window)
      fail("the validation split (the last " + percent(1.0 - options_.split) + " of its " + std::to_string(total) +
           " tokens: " + std::to_string(validation_.size()) + ") is shorter than " + shape +
           "; use more data, a shorter seq_length, a smaller split, or split 1 for no validation");
    validation_windows_ = (validation_.size() - 1) / seq;
  }
}

std::vector<uint64_t> WindowSampler::epoch_order(uint64_t epoch) const {
  std::vector<uint64_t> order(static_cast<std::size_t>(train_windows_));
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::mt19937_64 engine(epoch_seed(options_.seed, epoch));
  for (std::size_t i = order.size(); i > 1; --i) {  // Fisher-Yates, from the back
    const auto j = static_cast<std::size_t>(bounded_random(engine, i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

uint64_t WindowSampler::train_window_start(uint64_t position) {
  const uint64_t epoch = position / train_windows_;
  if (cached_order_.empty() || cached_epoch_ != epoch) {
    cached_order_ = epoch_order(epoch);
    cached_epoch_ = epoch;
  }
  return train_.begin + cached_order_[static_cast<std::size_t>(position % train_windows_)] * options_.seq_length;
}

uint64_t WindowSampler::validation_window_start(uint64_t window) const {
  if (window >= validation_windows_)
    throw std::out_of_range("dataset " + dataset_->prefix().string() + ": validation window " + std::to_string(window) +
                            " requested; there are " + std::to_string(validation_windows_));
  return validation_.begin + window * options_.seq_length;
}

void WindowSampler::check_buffers(std::size_t batch_size, std::span<int32_t> inputs, std::span<int32_t> targets) const {
  const std::size_t need = batch_size * options_.seq_length;
  if (inputs.size() != need || targets.size() != need)
    throw std::invalid_argument("WindowSampler: a batch of " + std::to_string(batch_size) + " x seq_length " +
                                std::to_string(options_.seq_length) + " needs " + std::to_string(need) +
                                " int32 values for inputs and for targets; got " + std::to_string(inputs.size()) +
                                " and " + std::to_string(targets.size()));
}

void WindowSampler::fill_window(uint64_t start, std::span<int32_t> inputs, std::span<int32_t> targets) const {
  const std::size_t seq = options_.seq_length;
  std::vector<int64_t> window(seq + 1);
  dataset_->tokens().copy_to(static_cast<std::size_t>(start), window);
  const int64_t limit = options_.vocab_size > 0 ? options_.vocab_size : int64_t{std::numeric_limits<int32_t>::max()} + 1;
  for (std::size_t i = 0; i <= seq; ++i) {
    if (window[i] < 0 || window[i] >= limit)
      throw DataError(dataset_->prefix().string(),
                      "dataset " + dataset_->prefix().string() + ": token id " + std::to_string(window[i]) +
                          " at token offset " + std::to_string(start + i) + " is outside " +
                          (options_.vocab_size > 0 ? "the vocabulary [0, " + std::to_string(limit) + ")"
                                                   : std::string("[0, 2^31) (int32 token ids)")));
  }
  for (std::size_t i = 0; i < seq; ++i) {
    inputs[i] = static_cast<int32_t>(window[i]);
    targets[i] = static_cast<int32_t>(window[i + 1]);
  }
}

void WindowSampler::batch(uint64_t position, std::size_t batch_size, std::span<int32_t> inputs,
                          std::span<int32_t> targets) {
  check_buffers(batch_size, inputs, targets);
  const std::size_t seq = options_.seq_length;
  for (std::size_t b = 0; b < batch_size; ++b)
    fill_window(train_window_start(position + b), inputs.subspan(b * seq, seq), targets.subspan(b * seq, seq));
}

Batch WindowSampler::batch(uint64_t position, std::size_t batch_size) {
  Batch out;
  out.inputs.resize(batch_size * options_.seq_length);
  out.targets.resize(out.inputs.size());
  batch(position, batch_size, out.inputs, out.targets);
  return out;
}

void WindowSampler::validation_batch(uint64_t first_window, std::size_t batch_size, std::span<int32_t> inputs,
                                     std::span<int32_t> targets) const {
  check_buffers(batch_size, inputs, targets);
  if (first_window > validation_windows_ || batch_size > validation_windows_ - first_window)
    throw std::out_of_range("dataset " + dataset_->prefix().string() + ": validation windows [" +
                            std::to_string(first_window) + ", " + std::to_string(first_window + batch_size) +
                            ") requested; there are " + std::to_string(validation_windows_));
  const std::size_t seq = options_.seq_length;
  for (std::size_t b = 0; b < batch_size; ++b)
    fill_window(validation_window_start(first_window + b), inputs.subspan(b * seq, seq), targets.subspan(b * seq, seq));
}

Batch WindowSampler::validation_batch(uint64_t first_window, std::size_t batch_size) const {
  Batch out;
  out.inputs.resize(batch_size * options_.seq_length);
  out.targets.resize(out.inputs.size());
  validation_batch(first_window, batch_size, out.inputs, out.targets);
  return out;
}

}  // namespace plexus::data
