// A multimodal dataset for MIMO training (docs/mimo.md, "The multimodal dataset"): samples that
// pair an image with a token sequence holding placeholder tokens where the image's embeddings go.
// On disk, beside each other, for a PREFIX:
//   PREFIX.bin / PREFIX.idx  a Megatron indexed dataset of the token sequences, one document per
//                            sample, in sample order;
//   PREFIX.images.npy        float32 [samples, channels * height * width]: image i, channel-major,
//                            rows top to bottom (numpy.load reads it; reshape to [N, C, H, W]);
//   PREFIX.pairs.npy         int64 [samples]: each sample's pairing hash, the XXH64 of its tokens
//                            (int32, little-endian) seeded with the XXH64 of its pixels' bytes;
//   PREFIX.mimo.json         the manifest: format, counts, the split, the image geometry, the
//                            special token and the vocabulary.
// A sample is read by one index into both files, so an image cannot be paired with another
// sample's text by the reader; the pairing hash catches files that were reordered or replaced
// apart from each other.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {

struct MultimodalManifest {
  int64_t samples = 0;
  int64_t train_samples = 0;  // samples [0, train_samples) train; the rest are held out (validation)
  std::string modality = "images";
  int32_t special_token = 0;     // the placeholder token of the modality's embeddings
  int64_t tokens_per_image = 0;  // placeholders per sample
  int64_t channels = 1, height = 0, width = 0;
  std::vector<std::string> vocabulary;  // token strings by id
  // The position in each sequence of the token a task asks for (the digit's word), or -1: the
  // accuracy of predicting it is reported.
  int64_t answer_position = -1;
  int64_t pixels() const { return channels * height * width; }
};

// 0 .. n-1 in an order that depends on the seed only (a Fisher-Yates shuffle over mt19937_64
// with unbiased draws; std::shuffle's order is the standard library's own): how plexus data
// digits orders the samples and a MIMO run each epoch, alike on every rank and machine.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

// The pairing hash of one sample.
uint64_t pairing_hash(std::span<const int32_t> tokens, std::span<const float> pixels) noexcept;

// Writes a multimodal dataset; nothing appears at PREFIX until finalize() succeeds (the files
// are written beside it under temporary names and renamed, the manifest last).
class MultimodalDatasetWriter {
 public:
  MultimodalDatasetWriter(std::filesystem::path prefix, MultimodalManifest manifest, TokenDtype dtype);
  ~MultimodalDatasetWriter();
  MultimodalDatasetWriter(const MultimodalDatasetWriter&) = delete;
  MultimodalDatasetWriter& operator=(const MultimodalDatasetWriter&) = delete;

  // One sample: its tokens and its image's pixels (manifest.pixels() values).
  void add(std::span<const int32_t> tokens, std::span<const float> pixels);
  // Writes the files; manifest.samples becomes the count added.
  void finalize();

 private:
  std::filesystem::path prefix_;
  MultimodalManifest manifest_;
  IndexedDatasetWriter tokens_;
  std::vector<float> pixels_;
  std::vector<int64_t> pairs_;
};

// A multimodal dataset opened read-only and checked: every file present, the manifest readable,
// the counts and shapes agreeing. Each problem is a DataError naming the file and what was
// expected.
class MultimodalDataset {
 public:
  explicit MultimodalDataset(std::filesystem::path prefix);
  ~MultimodalDataset();
  MultimodalDataset(MultimodalDataset&&) noexcept;

  const std::filesystem::path& prefix() const noexcept;
  const MultimodalManifest& manifest() const noexcept;
  // Sample i's tokens and pixels; DataError naming the sample when its pairing hash differs.
  std::vector<int32_t> tokens(std::size_t sample) const;
  std::span<const float> pixels(std::size_t sample) const;
  void check_pairing(std::size_t sample) const;

 private:
  struct Files;
  std::unique_ptr<Files> files_;
};

// The manifest file of PREFIX, and the images and pairs files.
std::filesystem::path manifest_path(const std::filesystem::path& prefix);
std::filesystem::path images_path(const std::filesystem::path& prefix);
std::filesystem::path pairs_path(const std::filesystem::path& prefix);

}  // namespace plexus::data
