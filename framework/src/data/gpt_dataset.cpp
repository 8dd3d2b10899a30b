// GptDataset: the indices of gpt_indices.cpp, built or mapped from the cache, and the samples
// read through them.
#include "plexus/core/data/gpt_dataset.hpp"

#include <cstdio>
#include <stdexcept>
#include <variant>

#include "data/npy_file.hpp"
#include "plexus/core/checkpoint/atomic_file.hpp"
#include "plexus/core/logging.hpp"

namespace plexus::data {

const char* split_name(Split split) noexcept {
  switch (split) {
    case Split::train:
      return "train";
    case Split::valid:
      return "valid";
    case Split::test:
      return "test";
  }
  return "?";
}

uint64_t fnv1a64(std::span<const std::byte> bytes, uint64_t hash) noexcept {
  for (const std::byte b : bytes) hash = (hash ^ std::to_integer<uint64_t>(b)) * 0x100000001b3ULL;
  return hash;
}

// The indices, owned (just built) or mapped (from the cache): the spans are what sample() reads.
struct GptDataset::Indices {
  std::variant<GptIndices, std::tuple<MappedNpy<int32_t>, MappedNpy<int64_t>, MappedNpy<int64_t>>> storage;
  std::span<const int32_t> document_index;
  std::span<const int64_t> sample_index, shuffle_index;
};

namespace {

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::vector<int32_t> sequence_lengths(const IndexedDataset& dataset) {
  std::vector<int32_t> lengths(dataset.sequence_count());
  for (std::size_t s = 0; s < lengths.size(); ++s)
    lengths[s] = static_cast<int32_t>(dataset.sequence_length(s));
  return lengths;
}

// What the cache is keyed by: everything the indices depend on, the dataset's content included.
std::string describe(const IndexedDataset& dataset, std::span<const int32_t> lengths, Split split,
                     const GptIndexParams& p) {
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(dataset.prefix(), ec);
  std::string text = "{\n";
  text += "    \"class\": \"GPTDataset\",\n";
  text += "    \"dataset_path\": \"" + (ec ? dataset.prefix() : absolute).string() + "\",\n";
  text += "    \"dataset_sequences\": " + std::to_string(dataset.sequence_count()) + ",\n";
  text += "    \"dataset_tokens\": " + std::to_string(dataset.token_count()) + ",\n";
  text += "    \"dataset_lengths_fnv1a64\": \"" + hex64(fnv1a64(std::as_bytes(lengths))) + "\",\n";
  text += "    \"index_split\": \"" + std::string(split_name(split)) + "\",\n";
  text += "    \"sequences\": [" + std::to_string(p.first_sequence) + ", " + std::to_string(p.end_sequence) +
          "],\n";
  text += "    \"num_samples\": " + (p.num_samples ? std::to_string(*p.num_samples) : std::string("null")) +
          ",\n";
  text += "    \"random_seed\": " + std::to_string(p.seed) + ",\n";
  text += "    \"sequence_length\": " + std::to_string(p.seq_length) + ",\n";
  text += "    \"add_extra_token_to_sequence\": true,\n";
  text += "    \"drop_last_partial_sequence\": true\n";
  text += "}";
  return text;
}

struct CachePaths {
  std::filesystem::path description, document_index, sample_index, shuffle_index;
};

CachePaths cache_paths(const std::filesystem::path& dir, const std::string& description, Split split) {
  const std::string base = hex64(fnv1a64(std::as_bytes(std::span(description.data(), description.size())))) +
                           "-GPTDataset-" + split_name(split) + "-";
  return {dir / (base + "description.txt"), dir / (base + "document_index.npy"),
          dir / (base + "sample_index.npy"), dir / (base + "shuffle_index.npy")};
}

std::string read_text(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return {};
  const MappedFile mapped(file);
  return {reinterpret_cast<const char*>(mapped.bytes().data()), mapped.size()};
}

}  // namespace

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> dataset, Split split,
                       const GptIndexParams& params, const std::filesystem::path& cache_dir)
    : dataset_(std::move(dataset)), split_(split), params_(params), indices_(std::make_unique<Indices>()) {
  if (!dataset_) throw std::invalid_argument("GptDataset: no dataset");
  const std::vector<int32_t> lengths = sequence_lengths(*dataset_);
  description_ = describe(*dataset_, lengths, split, params);
  const CachePaths paths = cache_paths(cache_dir, description_, split);
  Indices& in = *indices_;

  if (!cache_dir.empty() && read_text(paths.description) == description_) {
    auto documents = MappedNpy<int32_t>::open(paths.document_index);
    auto samples = MappedNpy<int64_t>::open(paths.sample_index, 2);
    auto shuffle = MappedNpy<int64_t>::open(paths.shuffle_index);
    if (documents && samples && shuffle && samples->values().size() == 2 * (shuffle->values().size() + 1)) {
      in.document_index = documents->values();
      in.sample_index = samples->values();
      in.shuffle_index = shuffle->values();
      in.storage = std::make_tuple(std::move(*documents), std::move(*samples), std::move(*shuffle));
      from_cache_ = true;
    }
  }
  if (!from_cache_) {
    GptIndices built = build_gpt_indices(lengths, params);
    if (!cache_dir.empty()) {
      try {
        std::filesystem::create_directories(cache_dir);
        write_npy<int32_t>(paths.document_index, built.document_index);
        write_npy<int64_t>(paths.sample_index, built.sample_index, 2);
        write_npy<int64_t>(paths.shuffle_index, built.shuffle_index);
        // Last: a description on disk means its three arrays are complete.
        checkpoint::write_file_atomically(paths.description, description_);
      } catch (const std::exception& e) {
        log_warn("data", "the " + std::string(split_name(split)) + " sample index of " +
                             dataset_->prefix().string() + " is not cached in " + cache_dir.string() + ": " +
                             e.what());
      }
    }
    in.storage = std::move(built);
    const GptIndices& owned = std::get<GptIndices>(in.storage);
    in.document_index = owned.document_index;
    in.sample_index = owned.sample_index;
    in.shuffle_index = owned.shuffle_index;
  }
  const uint64_t per_epoch = params.end_sequence - params.first_sequence;
  epochs_ = per_epoch == 0 ? 0 : in.document_index.size() / per_epoch;
}

GptDataset::~GptDataset() = default;
GptDataset::GptDataset(GptDataset&&) noexcept = default;
GptDataset& GptDataset::operator=(GptDataset&&) noexcept = default;

uint64_t GptDataset::size() const noexcept {
  return indices_->shuffle_index.size();
}

void GptDataset::sample(uint64_t i, std::span<int64_t> out) const {
  const Indices& in = *indices_;
  const std::size_t want = std::size_t{params_.seq_length} + 1;
  if (i >= size() || out.size() != want)
    throw std::out_of_range("GptDataset: sample " + std::to_string(i) + " of " + std::to_string(size()) +
                            " into " + std::to_string(out.size()) +
                            " tokens (seq_length + 1 = " + std::to_string(want) + ")");
  const auto k = static_cast<std::size_t>(in.shuffle_index[static_cast<std::size_t>(i)]);
  const int64_t first = in.sample_index[2 * k], first_offset = in.sample_index[2 * k + 1];
  const int64_t last = in.sample_index[2 * k + 2], last_offset = in.sample_index[2 * k + 3];
  const TokenView tokens = dataset_->tokens();
  std::size_t filled = 0;
  for (int64_t d = first; d <= last; ++d) {
    const auto sequence = static_cast<std::size_t>(in.document_index[static_cast<std::size_t>(d)]);
    const int64_t offset = d == first ? first_offset : 0;
    const int64_t end = d == last ? last_offset + 1 : int64_t{dataset_->sequence_length(sequence)};
    const auto count = static_cast<std::size_t>(end - offset);
    if (filled + count > want)
      throw DataError(dataset_->prefix().string(), "the sample index of " + dataset_->prefix().string() +
                                                       " does not fit its lengths (sample " +
                                                       std::to_string(i) + ")");
    tokens.copy_to(
        static_cast<std::size_t>(dataset_->sequence_offset(sequence) + static_cast<uint64_t>(offset)),
        out.subspan(filled, count));
    filled += count;
  }
  if (filled != want)
    throw DataError(dataset_->prefix().string(), "the sample index of " + dataset_->prefix().string() +
                                                     " gives sample " + std::to_string(i) + " " +
                                                     std::to_string(filled) + " tokens, not " +
                                                     std::to_string(want));
}

}  // namespace plexus::data
