// plexus data digits: reads scikit-learn's digits.csv.gz (gzip'd CSV, no header, 1,797 lines of
// 65 integers: 64 pixels of an 8x8 image in row-major order, 0..16, then the label 0..9), shuffles
// the samples with a fixed seed, and writes them as a multimodal dataset: pixels / 16 as float32
// [1, 8, 8] and the tokens "<bos> <image> x P this digit is <word> <eos>", the first samples for
// training and the last --test held out.
#include "plexus/data_digits.hpp"

#include <zlib.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "plexus/cli.hpp"
#include "plexus/core/data/multimodal_dataset.hpp"

namespace plexus::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDebianCsv = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

constexpr const char* kHelp =
    R"(usage: plexus data digits --output-prefix PREFIX [--csv FILE] [--image-tokens P] [--test N] [--seed S]

Writes scikit-learn's 8x8 handwritten digits (1,797 images) as a multimodal dataset for MIMO
training (docs/mimo.md): PREFIX.mimo.json, PREFIX.bin/.idx, PREFIX.images.npy, PREFIX.pairs.npy.
Each sample pairs an image (pixels / 16, float32 [1, 8, 8]) with the tokens
  <bos> <image> x P this digit is <word> <eos>
in a vocabulary of 17 words (<pad> <bos> <eos> <image> this digit is zero ... nine). The samples
are shuffled with --seed (default 1234); the last --test (default 360) are held out.

--csv is digits.csv.gz as scikit-learn ships it: Debian's python3-sklearn installs it at
  )"
    "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
    R"( (the default when present);
scripts/fetch-digits.sh extracts it from that package without installing it.
--image-tokens is the number of <image> placeholders, which must equal the encoder's patches per
image (image_size / patch_size, squared: 16 for 2x2 patches of the 8x8 image).
)";

const std::vector<std::string> kWords{"zero", "one", "two",   "three", "four",
                                      "five", "six", "seven", "eight", "nine"};
constexpr int32_t kBos = 1, kEos = 2, kImage = 3, kThis = 4, kDigit = 5, kIs = 6, kZero = 7;

struct Digit {
  std::array<float, 64> pixels{};
  int32_t label = 0;
};

// The whole gzip'd file as text.
std::string read_gzip(const fs::path& file) {
  const std::unique_ptr<gzFile_s, int (*)(gzFile)> in(gzopen(file.c_str(), "rb"), &gzclose);
  if (!in) throw std::runtime_error(file.string() + ": cannot open");
  std::string text;
  std::array<char, 65536> buffer{};
  int n = 0;
  while ((n = gzread(in.get(), buffer.data(), static_cast<unsigned>(buffer.size()))) > 0)
    text.append(buffer.data(), static_cast<std::size_t>(n));
  if (n < 0) throw std::runtime_error(file.string() + ": not a readable gzip file");
  return text;
}

std::vector<Digit> read_digits(const fs::path& file) {
  std::istringstream lines(read_gzip(file));
  std::vector<Digit> digits;
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::vector<int> values;
    std::string field;
    while (std::getline(fields, field, ',')) {
      try {
        std::size_t used = 0;
        values.push_back(std::stoi(field, &used));
        if (used != field.size()) throw std::invalid_argument(field);
      } catch (const std::exception&) {
        throw std::runtime_error(file.string() + ":" + std::to_string(number) + ": '" + field +
                                 "' is not an integer");
      }
    }
    if (values.size() != 65)
      throw std::runtime_error(file.string() + ":" + std::to_string(number) + ": " +
                               std::to_string(values.size()) +
                               " values; a digits line has 65 (64 pixels and the label)");
    Digit d;
    for (std::size_t i = 0; i < 64; ++i) {
      if (values[i] < 0 || values[i] > 16)
        throw std::runtime_error(file.string() + ":" + std::to_string(number) + ": pixel " +
                                 std::to_string(i) + " is " + std::to_string(values[i]) + ", outside 0..16");
      d.pixels[i] = static_cast<float>(values[i]) / 16.0f;
    }
    if (values[64] < 0 || values[64] > 9)
      throw std::runtime_error(file.string() + ":" + std::to_string(number) + ": label " +
                               std::to_string(values[64]) + " is outside 0..9");
    d.label = values[64];
    digits.push_back(d);
  }
  if (digits.empty()) throw std::runtime_error(file.string() + ": no digits");
  return digits;
}

}  // namespace

int data_digits(const std::vector<std::string>& args) {
  return run_guarded("plexus data digits", [&] {
    std::string prefix, csv;
    int64_t image_tokens = 16, test = 360;
    uint64_t seed = 1234;
    bool help = false;
    po::options_description options("options");
    options.add_options()("output-prefix", po::value(&prefix), "where to write PREFIX.*")(
        "csv", po::value(&csv), "digits.csv.gz (default: Debian's python3-sklearn copy)")(
        "image-tokens", po::value(&image_tokens), "<image> placeholders per sample (default 16)")(
        "test", po::value(&test), "samples held out (default 360)")(
        "seed", po::value(&seed), "shuffle seed (default 1234)")("help,h", po::bool_switch(&help),
                                                                 "this help");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(options).run(), vm);
    po::notify(vm);
    if (help) {
      std::cout << kHelp << "\n" << options;
      return 0;
    }
    if (prefix.empty()) {
      std::cerr << "plexus data digits: error: --output-prefix is required\n\n" << kHelp;
      return 1;
    }
    if (csv.empty()) {
      if (!fs::exists(kDebianCsv)) {
        std::cerr << "plexus data digits: error: no --csv given and " << kDebianCsv
                  << " is absent: run scripts/fetch-digits.sh DIR (it extracts digits.csv.gz from Debian's "
                     "python3-sklearn) and pass --csv DIR/digits.csv.gz\n";
        return 1;
      }
      csv = kDebianCsv;
    }
    if (image_tokens < 1 || image_tokens > 4096) {
      std::cerr << "plexus data digits: error: --image-tokens must be from 1 to 4096, got " << image_tokens
                << "\n";
      return 1;
    }
    const std::vector<Digit> digits = read_digits(csv);
    if (test < 1 || test >= static_cast<int64_t>(digits.size())) {
      std::cerr << "plexus data digits: error: --test must hold out from 1 to " << digits.size() - 1
                << " of the " << digits.size() << " samples, got " << test << "\n";
      return 1;
    }
    const std::vector<int64_t> order = data::seeded_permutation(static_cast<int64_t>(digits.size()), seed);

    data::MultimodalManifest manifest;
    manifest.train_samples = static_cast<int64_t>(digits.size()) - test;
    manifest.modality = "images";
    manifest.special_token = kImage;
    manifest.tokens_per_image = image_tokens;
    manifest.channels = 1;
    manifest.height = 8;
    manifest.width = 8;
    manifest.vocabulary = {"<pad>", "<bos>", "<eos>", "<image>", "this", "digit", "is"};
    manifest.vocabulary.insert(manifest.vocabulary.end(), kWords.begin(), kWords.end());
    manifest.answer_position = image_tokens + 4;  // <bos>, the placeholders, this, digit, is, then the word
    data::MultimodalDatasetWriter writer(prefix, manifest, data::TokenDtype::uint8);
    std::vector<int64_t> counts(10, 0), held_out(10, 0);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const Digit& d = digits[static_cast<std::size_t>(order[k])];
      std::vector<int32_t> tokens{kBos};
      tokens.insert(tokens.end(), static_cast<std::size_t>(image_tokens), kImage);
      tokens.insert(tokens.end(), {kThis, kDigit, kIs, kZero + d.label, kEos});
      writer.add(tokens, d.pixels);
      ++(static_cast<int64_t>(k) < manifest.train_samples ? counts
                                                          : held_out)[static_cast<std::size_t>(d.label)];
    }
    writer.finalize();
    std::cout << "wrote " << digits.size() << " samples (" << manifest.train_samples << " train, " << test
              << " held out) to " << prefix << ".{mimo.json,bin,idx,images.npy,pairs.npy}\n"
              << "  each: <bos> <image> x " << image_tokens << " this digit is <word> <eos> ("
              << image_tokens + 6 << " tokens), an 8x8 image\n  held out per digit:";
    for (std::size_t c = 0; c < 10; ++c) std::cout << " " << c << ":" << held_out[c];
    std::cout << "\n";
    return 0;
  });
}

}  // namespace plexus::cli
