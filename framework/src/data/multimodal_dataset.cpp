// The multimodal dataset's files (multimodal_dataset.hpp): written beside each other and renamed
// into place, the manifest last; read back through memory maps and checked before use.
#include "plexus/core/data/multimodal_dataset.hpp"

#include <boost/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "data/npy_file.hpp"
#include "plexus/core/xxhash64.hpp"

namespace plexus::data {
namespace {

constexpr const char* kFormat = "plexus-multimodal";
constexpr int64_t kVersion = 1;

std::filesystem::path with_suffix(const std::filesystem::path& prefix, const char* suffix) {
  return std::filesystem::path(prefix.string() + suffix);
}

boost::json::object manifest_json(const MultimodalManifest& m, const std::filesystem::path& prefix) {
  boost::json::array vocabulary;
  for (const std::string& token : m.vocabulary) vocabulary.emplace_back(token);
  return boost::json::object{
      {"format", kFormat},
      {"version", kVersion},
      {"samples", m.samples},
      {"train_samples", m.train_samples},
      {"answer_position", m.answer_position},
      {"modalities",
       boost::json::object{
           {m.modality, boost::json::object{{"file", images_path(prefix).filename().string()},
                                            {"special_token", m.special_token},
                                            {"tokens_per_sample", m.tokens_per_image},
                                            {"shape", boost::json::array{m.channels, m.height, m.width}},
                                            {"dtype", "float32"}}}}},
      {"tokens", boost::json::object{{"file", bin_path(prefix).filename().string()}}},
      {"pairs", boost::json::object{{"file", pairs_path(prefix).filename().string()},
                                    {"hash", "xxh64(tokens int32 LE, seed = xxh64(pixels float32 LE))"}}},
      {"vocabulary", std::move(vocabulary)}};
}

// A manifest field, or a DataError naming the file and the key.
const boost::json::value& field(const boost::json::object& object, const char* key, const std::string& file) {
  const boost::json::value* v = object.if_contains(key);
  if (v == nullptr) throw DataError(file, file + ": the manifest has no \"" + std::string(key) + "\"");
  return *v;
}
int64_t integer(const boost::json::object& object, const char* key, const std::string& file) {
  const boost::json::value& v = field(object, key, file);
  if (!v.is_int64()) throw DataError(file, file + ": \"" + std::string(key) + "\" must be an integer");
  return v.as_int64();
}

MultimodalManifest read_manifest(const std::filesystem::path& file) {
  const std::string name = file.string();
  std::ifstream in(file);
  if (!in)
    throw DataError(name, name +
                              ": no such file (a multimodal dataset PREFIX has PREFIX.mimo.json, "
                              "PREFIX.bin/.idx, PREFIX.images.npy and PREFIX.pairs.npy; plexus data digits "
                              "makes one)");
  std::stringstream text;
  text << in.rdbuf();
  boost::json::value parsed;
  try {
    parsed = boost::json::parse(text.str());
  } catch (const std::exception& e) {
    throw DataError(name, name + ": not JSON (" + e.what() + ")");
  }
  if (!parsed.is_object()) throw DataError(name, name + ": the manifest must be a JSON object");
  const boost::json::object& root = parsed.as_object();
  const boost::json::value& format = field(root, "format", name);
  if (!format.is_string() || format.as_string() != kFormat || integer(root, "version", name) != kVersion)
    throw DataError(
        name, name + ": not a " + std::string(kFormat) + " manifest of version " + std::to_string(kVersion));
  MultimodalManifest m;
  m.samples = integer(root, "samples", name);
  m.train_samples = integer(root, "train_samples", name);
  m.answer_position = integer(root, "answer_position", name);
  const boost::json::value& modalities = field(root, "modalities", name);
  if (!modalities.is_object() || modalities.as_object().size() != 1)
    throw DataError(name, name + ": \"modalities\" must hold exactly one modality (images)");
  const auto& [modality, spec] = *modalities.as_object().begin();
  m.modality = std::string(modality);
  if (!spec.is_object()) throw DataError(name, name + ": modality " + m.modality + " must be an object");
  m.special_token = static_cast<int32_t>(integer(spec.as_object(), "special_token", name));
  m.tokens_per_image = integer(spec.as_object(), "tokens_per_sample", name);
  const boost::json::value& shape = field(spec.as_object(), "shape", name);
  if (!shape.is_array() || shape.as_array().size() != 3 ||
      !std::all_of(shape.as_array().begin(), shape.as_array().end(),
                   [](const boost::json::value& v) { return v.is_int64() && v.as_int64() > 0; }))
    throw DataError(name, name + ": the shape of " + m.modality + " must be [channels, height, width]");
  m.channels = shape.as_array()[0].as_int64();
  m.height = shape.as_array()[1].as_int64();
  m.width = shape.as_array()[2].as_int64();
  const boost::json::value& vocabulary = field(root, "vocabulary", name);
  if (!vocabulary.is_array()) throw DataError(name, name + ": \"vocabulary\" must be a list of strings");
  for (const boost::json::value& t : vocabulary.as_array()) {
    if (!t.is_string()) throw DataError(name, name + ": \"vocabulary\" must be a list of strings");
    m.vocabulary.emplace_back(t.as_string());
  }
  if (m.samples < 1 || m.train_samples < 1 || m.train_samples > m.samples || m.tokens_per_image < 1)
    throw DataError(name, name + ": samples (" + std::to_string(m.samples) + "), train_samples (" +
                              std::to_string(m.train_samples) + ") and tokens_per_sample (" +
                              std::to_string(m.tokens_per_image) +
                              ") must be positive, train_samples at most samples");
  return m;
}

}  // namespace

std::filesystem::path manifest_path(const std::filesystem::path& prefix) {
  return with_suffix(prefix, ".mimo.json");
}
std::filesystem::path images_path(const std::filesystem::path& prefix) {
  return with_suffix(prefix, ".images.npy");
}
std::filesystem::path pairs_path(const std::filesystem::path& prefix) {
  return with_suffix(prefix, ".pairs.npy");
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::mt19937_64 random(seed);
  for (std::size_t i = order.size(); i > 1; --i) {
    const uint64_t range = i, limit = UINT64_MAX - UINT64_MAX % range;
    uint64_t draw = random();
    while (draw >= limit) draw = random();
    std::swap(order[i - 1], order[static_cast<std::size_t>(draw % range)]);
  }
  return order;
}

uint64_t pairing_hash(std::span<const int32_t> tokens, std::span<const float> pixels) noexcept {
  return xxh64(std::as_bytes(tokens), xxh64(std::as_bytes(pixels)));
}

MultimodalDatasetWriter::MultimodalDatasetWriter(std::filesystem::path prefix, MultimodalManifest manifest,
                                                 TokenDtype dtype)
    : prefix_(std::move(prefix)), manifest_(std::move(manifest)), tokens_(prefix_, dtype) {}

MultimodalDatasetWriter::~MultimodalDatasetWriter() = default;

void MultimodalDatasetWriter::add(std::span<const int32_t> tokens, std::span<const float> pixels) {
  if (static_cast<int64_t>(pixels.size()) != manifest_.pixels())
    throw DataError(prefix_.string(), "an image of " + std::to_string(pixels.size()) + " values, expected " +
                                          std::to_string(manifest_.pixels()));
  tokens_.add_document(tokens);
  pixels_.insert(pixels_.end(), pixels.begin(), pixels.end());
  pairs_.push_back(static_cast<int64_t>(pairing_hash(tokens, pixels)));
}

void MultimodalDatasetWriter::finalize() {
  manifest_.samples = static_cast<int64_t>(pairs_.size());
  write_npy(images_path(prefix_), std::span<const float>(pixels_),
            static_cast<std::size_t>(manifest_.pixels()));
  write_npy(pairs_path(prefix_), std::span<const int64_t>(pairs_));
  tokens_.finalize();
  const std::filesystem::path file = manifest_path(prefix_);
  const std::filesystem::path temporary(file.string() + ".tmp-" + std::to_string(::getpid()));
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << boost::json::serialize(manifest_json(manifest_, prefix_)) << "\n";
    if (!out.flush()) throw DataError(temporary.string(), "cannot write " + temporary.string());
  }
  std::filesystem::rename(temporary, file);
}

struct MultimodalDataset::Files {
  std::filesystem::path prefix;
  MultimodalManifest manifest;
  IndexedDataset tokens;
  MappedNpy<float> images;
  MappedNpy<int64_t> pairs;
};

MultimodalDataset::MultimodalDataset(std::filesystem::path prefix) {
  MultimodalManifest manifest = read_manifest(manifest_path(prefix));
  IndexedDataset tokens(prefix);
  auto images = MappedNpy<float>::open(images_path(prefix), static_cast<std::size_t>(manifest.pixels()));
  if (!images || static_cast<int64_t>(images->values().size()) != manifest.samples * manifest.pixels())
    throw DataError(images_path(prefix).string(),
                    images_path(prefix).string() + ": expected a float32 array [" +
                        std::to_string(manifest.samples) + ", " + std::to_string(manifest.pixels()) +
                        "] (the manifest's samples and image shape)");
  auto pairs = MappedNpy<int64_t>::open(pairs_path(prefix));
  if (!pairs || static_cast<int64_t>(pairs->values().size()) != manifest.samples)
    throw DataError(pairs_path(prefix).string(), pairs_path(prefix).string() + ": expected an int64 array [" +
                                                     std::to_string(manifest.samples) +
                                                     "] of pairing hashes");
  if (static_cast<int64_t>(tokens.document_count()) != manifest.samples)
    throw DataError(idx_path(prefix).string(),
                    idx_path(prefix).string() + " holds " + std::to_string(tokens.document_count()) +
                        " documents; the manifest says " + std::to_string(manifest.samples) +
                        " samples, one document each");
  files_ = std::make_unique<Files>(
      Files{prefix, std::move(manifest), std::move(tokens), std::move(*images), std::move(*pairs)});
}

MultimodalDataset::~MultimodalDataset() = default;
MultimodalDataset::MultimodalDataset(MultimodalDataset&&) noexcept = default;

const std::filesystem::path& MultimodalDataset::prefix() const noexcept {
  return files_->prefix;
}
const MultimodalManifest& MultimodalDataset::manifest() const noexcept {
  return files_->manifest;
}

std::vector<int32_t> MultimodalDataset::tokens(std::size_t sample) const {
  const TokenView view = files_->tokens.document(sample);
  std::vector<int32_t> out(view.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(view[i]);
  return out;
}

std::span<const float> MultimodalDataset::pixels(std::size_t sample) const {
  const auto n = static_cast<std::size_t>(files_->manifest.pixels());
  return files_->images.values().subspan(sample * n, n);
}

void MultimodalDataset::check_pairing(std::size_t sample) const {
  const std::vector<int32_t> t = tokens(sample);
  const auto expected = static_cast<uint64_t>(files_->pairs.values()[sample]);
  if (pairing_hash(t, pixels(sample)) != expected)
    throw DataError(files_->prefix.string(),
                    files_->prefix.string() + ": sample " + std::to_string(sample) +
                        "'s image and tokens do not belong together (their pairing hash differs from " +
                        pairs_path(files_->prefix).filename().string() +
                        "): the images or the token files were reordered or replaced apart from each other");
}

}  // namespace plexus::data
