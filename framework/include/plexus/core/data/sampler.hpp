// Training and validation windows over a token dataset, GPT-pretraining style.
//
// The stream. The dataset's tokens are read as one stream, documents concatenated in order
// (no separator is inserted; see tokenizer.hpp). The stream is split once, by token count:
// the first floor(split * N) tokens are the training range and the rest the validation
// range. The split is contiguous, so no window of one range holds a token of the other: no
// leakage between them, at the price that the validation text is the end of the corpus, not
// a random sample of it (shuffle documents when preparing the data if that matters).
//
// Windows. A sample is a window of seq_length + 1 tokens: inputs = window[0, S), targets =
// window[1, S] (the inputs shifted by one). Within a range, window k starts at k * S, so
// consecutive windows share exactly one token (the last target of one is the first input of
// the next): the inputs tile the range and every (context, next token) pair of the range is
// trained on exactly once per epoch, as Megatron's GPTDataset does. A range of T tokens has
// floor((T - 1) / S) windows; a tail shorter than a window is not used. A range shorter than
// one window is an error naming the dataset, the token count and seq_length (the validation
// range is allowed to be empty only when split == 1).
//
// Order. Epoch e visits every training window once, in an order that is a Fisher-Yates
// shuffle driven by std::mt19937_64 seeded with mix(seed, e) (a splitmix64-style mix, so
// seed s epoch 1 does not replay seed s+1 epoch 0 as a plain seed + e would). Random indices
// come from bounded_random() below, an unbiased rejection method on the engine's raw 64-bit
// output: std::uniform_int_distribution is implementation-defined, so it is not used, and the
// order is therefore identical on every platform and standard library. Batches address a
// global sample position (epoch = position / windows_per_epoch), so training resumed at a
// position continues exactly where a run that never stopped would be.
//
// Validation windows are fixed and unshuffled: window k of the validation range, in order.
//
// Not thread-safe: batch() caches the current epoch's order. Use one sampler per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {

// A uniformly distributed integer in [0, bound) from raw engine output, without modulo bias:
// draws below 2^64 mod bound are rejected (fewer than one in two draws, whatever bound is).
// bound must be > 0. Identical on every platform for the same engine state.
uint64_t bounded_random(std::mt19937_64& engine, uint64_t bound);

// The seed of epoch `epoch`'s shuffle engine.
uint64_t epoch_seed(uint64_t seed, uint64_t epoch) noexcept;

struct WindowSamplerOptions {
  std::size_t seq_length = 0;  // S: tokens per sample; a window holds S + 1 tokens. >= 1.
  double split = 0.9;          // fraction of the tokens, from the start, used for training: (0, 1]
  uint64_t seed = 0;
  int64_t vocab_size = 0;      // > 0: a token outside [0, vocab_size) in a batch is a DataError
};

struct TokenRange {
  uint64_t begin = 0, end = 0;  // [begin, end) in the dataset's token stream
  uint64_t size() const noexcept { return end - begin; }
};

// One batch, row-major [batch_size, seq_length].
struct Batch {
  std::vector<int32_t> inputs, targets;
};

class WindowSampler {
 public:
  WindowSampler(std::shared_ptr<const IndexedDataset> dataset, WindowSamplerOptions options);

  const IndexedDataset& dataset() const noexcept { return *dataset_; }
  const WindowSamplerOptions& options() const noexcept { return options_; }
  std::size_t seq_length() const noexcept { return options_.seq_length; }
  TokenRange train_range() const noexcept { return train_; }
  TokenRange validation_range() const noexcept { return validation_; }
  uint64_t train_windows_per_epoch() const noexcept { return train_windows_; }
  uint64_t validation_window_count() const noexcept { return validation_windows_; }
  uint64_t epoch_of(uint64_t position) const noexcept { return position / train_windows_; }

  // Epoch `epoch`'s order of the training windows: a permutation of 0 .. windows - 1.
  std::vector<uint64_t> epoch_order(uint64_t epoch) const;

  // The first token (stream offset) of the training window used at global sample position
  // `position`, and of validation window `window`.
  uint64_t train_window_start(uint64_t position);
  uint64_t validation_window_start(uint64_t window) const;

  // Fills inputs and targets (each exactly batch_size * seq_length int32 values, row-major)
  // with the training samples at global positions position .. position + batch_size - 1.
  void batch(uint64_t position, std::size_t batch_size, std::span<int32_t> inputs, std::span<int32_t> targets);
  Batch batch(uint64_t position, std::size_t batch_size);

  // The same for validation windows first_window .. first_window + batch_size - 1, which must
  // all exist (validation_window_count()).
  void validation_batch(uint64_t first_window, std::size_t batch_size, std::span<int32_t> inputs,
                        std::span<int32_t> targets) const;
  Batch validation_batch(uint64_t first_window, std::size_t batch_size) const;

 private:
  void fill_window(uint64_t start, std::span<int32_t> inputs, std::span<int32_t> targets) const;
  void check_buffers(std::size_t batch_size, std::span<int32_t> inputs, std::span<int32_t> targets) const;

  std::shared_ptr<const IndexedDataset> dataset_;
  WindowSamplerOptions options_;
  TokenRange train_, validation_;
  uint64_t train_windows_ = 0, validation_windows_ = 0;
  uint64_t cached_epoch_ = 0;
  std::vector<uint64_t> cached_order_;  // empty until first use
};

}  // namespace plexus::data
