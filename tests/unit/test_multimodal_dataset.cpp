// The multimodal dataset of MIMO training (plexus/core/data/multimodal_dataset.hpp): written and
// read back; a pairing of images and texts changed behind its back (the images file reordered)
// detected, naming the sample; a manifest that disagrees with the files refused naming the file;
// what a MIMO step reads of it (engine/mimo/mimo_data.hpp): the language model's targets ignored
// at the image's places, the images cut into patches in a Conv2d's order, every rank's sample
// order the same; and `plexus data digits` on a small gzip'd CSV in scikit-learn's format.
#define BOOST_TEST_MODULE multimodal_dataset
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/mimo/mimo_data.hpp"
#include "plexus/core/data/multimodal_dataset.hpp"
#include "run_process.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using plexus::DataError;
using namespace plexus::data;

namespace {

// Samples "<bos> <image> x 4 is <digit>" with 4x4 images whose pixels are sample * 100 + index.
MultimodalManifest small_manifest() {
  MultimodalManifest m;
  m.train_samples = 4;
  m.special_token = 3;
  m.tokens_per_image = 4;
  m.channels = 1;
  m.height = 4;
  m.width = 4;
  m.vocabulary = {"<pad>", "<bos>", "<eos>", "<image>", "is", "a", "b"};
  m.answer_position = 6;
  return m;
}

std::vector<int32_t> tokens_of(int sample) {
  return {1, 3, 3, 3, 3, 4, 5 + sample % 2, 2};
}
std::vector<float> pixels_of(int sample) {
  std::vector<float> p(16);
  for (int i = 0; i < 16; ++i) p[static_cast<std::size_t>(i)] = static_cast<float>(sample * 100 + i);
  return p;
}

fs::path write_small(const fs::path& dir, int samples = 6) {
  const fs::path prefix = dir / "small";
  MultimodalDatasetWriter writer(prefix, small_manifest(), TokenDtype::uint8);
  for (int s = 0; s < samples; ++s) writer.add(tokens_of(s), pixels_of(s));
  writer.finalize();
  return prefix;
}

template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no refusal)";
}

}  // namespace

BOOST_AUTO_TEST_CASE(written_and_read_back) {
  plexus::test::TempDir dir;
  const fs::path prefix = write_small(dir.path());
  for (const fs::path& f : {manifest_path(prefix), images_path(prefix), pairs_path(prefix)})
    BOOST_TEST(fs::exists(f), f);
  const MultimodalDataset data(prefix);
  BOOST_TEST(data.manifest().samples == 6);
  BOOST_TEST(data.manifest().train_samples == 4);
  BOOST_TEST(data.manifest().vocabulary.size() == 7u);
  for (int s = 0; s < 6; ++s) {
    BOOST_TEST(data.tokens(static_cast<std::size_t>(s)) == tokens_of(s));
    const auto p = data.pixels(static_cast<std::size_t>(s));
    BOOST_TEST(std::vector<float>(p.begin(), p.end()) == pixels_of(s));
    data.check_pairing(static_cast<std::size_t>(s));
  }
}

// The images file with two rows swapped (sorted, filtered, replaced apart from the texts): the
// first sample whose image moved is refused by name.
BOOST_AUTO_TEST_CASE(a_reordered_images_file_is_detected) {
  plexus::test::TempDir dir;
  const fs::path prefix = write_small(dir.path());
  std::string bytes;
  {
    std::ifstream in(images_path(prefix), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::size_t row = 16 * sizeof(float), data_at = bytes.size() - 6 * row;
  std::string swapped = bytes;
  swapped.replace(data_at + 1 * row, row, bytes.substr(data_at + 2 * row, row));
  swapped.replace(data_at + 2 * row, row, bytes.substr(data_at + 1 * row, row));
  std::ofstream(images_path(prefix), std::ios::binary | std::ios::trunc) << swapped;
  const MultimodalDataset data(prefix);
  data.check_pairing(0);
  const std::string message = refusal([&] { data.check_pairing(1); });
  BOOST_TEST(message.find("sample 1's image and tokens do not belong together") != std::string::npos,
             message);
  plexus::MimoData mimo(prefix, 1);
  const std::string batch = refusal([&] { (void)mimo.language_batch({0, 2}); });
  BOOST_TEST(batch.find("sample 2's image and tokens do not belong together") != std::string::npos, batch);
}

BOOST_AUTO_TEST_CASE(files_that_disagree_are_refused_by_name) {
  plexus::test::TempDir dir;
  const fs::path prefix = write_small(dir.path());
  BOOST_TEST(refusal([&] {
               MultimodalDataset(dir.path() / "absent");
             }).find("absent.mimo.json: no such file") != std::string::npos);
  // A manifest promising more samples than the files hold.
  std::string text;
  {
    std::ifstream in(manifest_path(prefix));
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  boost::json::value manifest = boost::json::parse(text);
  manifest.as_object()["samples"] = 7;
  std::ofstream(manifest_path(prefix), std::ios::trunc) << boost::json::serialize(manifest);
  const std::string message = refusal([&] { MultimodalDataset{prefix}; });
  BOOST_TEST(message.find("small.images.npy: expected a float32 array [7, 16]") != std::string::npos,
             message);
  manifest.as_object()["format"] = "something else";
  std::ofstream(manifest_path(prefix), std::ios::trunc) << boost::json::serialize(manifest);
  BOOST_TEST(refusal([&] { MultimodalDataset{prefix}; }).find("not a plexus-multimodal manifest") !=
             std::string::npos);
}

// What a step reads: targets ignored (-1) where the next token is the image's; the images cut
// into 2x2 patches row by row, each patch's pixels row by row (a Conv2d with kernel = stride = 2).
BOOST_AUTO_TEST_CASE(batches_of_a_step) {
  plexus::test::TempDir dir;
  const fs::path prefix = write_small(dir.path());
  plexus::MimoData data(prefix, 7);
  const plexus::Batch lm = data.language_batch({1});
  BOOST_TEST(lm.tokens.shape() == (std::vector<int64_t>{1, 7}));
  const std::vector<int32_t> tokens(lm.tokens.data<int32_t>(), lm.tokens.data<int32_t>() + 7);
  const std::vector<int32_t> targets(lm.targets.data<int32_t>(), lm.targets.data<int32_t>() + 7);
  BOOST_TEST(tokens == (std::vector<int32_t>{1, 3, 3, 3, 3, 4, 6}));
  BOOST_TEST(targets == (std::vector<int32_t>{-1, -1, -1, -1, 4, 6, 2}));
  const plexus::Batch images = data.encoder_batch({1}, 2);
  BOOST_TEST(images.tokens.shape() == (std::vector<int64_t>{1, 4, 4}));
  const float* p = images.tokens.data<float>();
  // Patch 1 (top right) holds pixels (0,2) (0,3) (1,2) (1,3) of the 4x4 image: 2, 3, 6, 7.
  BOOST_TEST(std::vector<float>(p + 4, p + 8) == (std::vector<float>{102, 103, 106, 107}));
  // Patch 2 (bottom left): 8, 9, 12, 13.
  BOOST_TEST(std::vector<float>(p + 8, p + 12) == (std::vector<float>{108, 109, 112, 113}));
  BOOST_TEST(refusal([&] { (void)data.encoder_batch({1}, 3); }).find("patch_size 3 does not divide") !=
             std::string::npos);
  // Every rank computes the same order; an epoch is each training sample once; the held-out
  // samples follow the training ones.
  plexus::MimoData other(prefix, 7);
  const std::vector<int64_t> epoch = data.train_samples(0, 4, 0, 4);
  BOOST_TEST(epoch == other.train_samples(0, 4, 0, 4));
  BOOST_TEST(std::vector<int64_t>(epoch.begin() + 2, epoch.end()) == other.train_samples(0, 4, 2, 2));
  std::vector<int64_t> sorted = epoch;
  std::sort(sorted.begin(), sorted.end());
  BOOST_TEST(sorted == (std::vector<int64_t>{0, 1, 2, 3}));
  BOOST_TEST(data.valid_samples(0, 2, 0, 2) == (std::vector<int64_t>{4, 5}));
  BOOST_TEST(data.valid_batches(2) == 1);
}

// `plexus data digits` on 20 lines in scikit-learn's format: the counts, the split, a sample's
// tokens and pixels, the same bytes from the same seed, and a broken line named.
BOOST_AUTO_TEST_CASE(plexus_data_digits) {
  plexus::test::TempDir dir;
  std::ostringstream csv;
  for (int line = 0; line < 20; ++line) {
    csv << line % 17 << "," << line / 17 << ",";  // the line's number, in the first two pixels
    for (int i = 2; i < 64; ++i) csv << (line + i) % 17 << ",";
    csv << line % 10 << "\n";
  }
  const fs::path text = dir.write("digits.csv", csv.str());
  BOOST_TEST_REQUIRE(plexus::test::run_process("gzip -k " + plexus::test::quote(text.string())).status == 0);
  const std::string plexus = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus data digits --csv " +
                             plexus::test::quote(text.string() + ".gz") + " --test 5 --output-prefix ";
  const auto made = plexus::test::run_process(plexus + plexus::test::quote((dir.path() / "a").string()));
  BOOST_TEST_REQUIRE(made.status == 0, made.output);
  BOOST_TEST(made.output.find("wrote 20 samples (15 train, 5 held out)") != std::string::npos, made.output);
  const MultimodalDataset data(dir.path() / "a");
  BOOST_TEST(data.manifest().train_samples == 15);
  BOOST_TEST(data.manifest().tokens_per_image == 16);
  BOOST_TEST(data.manifest().answer_position == 20);
  for (std::size_t s = 0; s < 20; ++s) {
    const std::vector<int32_t> tokens = data.tokens(s);
    BOOST_TEST_REQUIRE(tokens.size() == 22u);
    BOOST_TEST(tokens.front() == 1);
    BOOST_TEST(std::count(tokens.begin(), tokens.end(), 3) == 16);
    // The first two pixels tell which line it came from, and the word is that line's label.
    const int line = static_cast<int>(data.pixels(s)[0] * 16.0f + 0.5f) +
                     17 * static_cast<int>(data.pixels(s)[1] * 16.0f + 0.5f);
    BOOST_TEST(tokens[20] == 7 + line % 10, "sample " << s);
    BOOST_TEST(data.manifest().vocabulary[static_cast<std::size_t>(tokens[17])] == "this");
  }
  BOOST_TEST_REQUIRE(
      plexus::test::run_process(plexus + plexus::test::quote((dir.path() / "b").string())).status == 0);
  const auto same =
      plexus::test::run_process("cmp " + plexus::test::quote((dir.path() / "a.images.npy").string()) + " " +
                                plexus::test::quote((dir.path() / "b.images.npy").string()));
  BOOST_TEST(same.status == 0, "the same seed gives the same order");
  const fs::path bad = dir.write("bad.csv", "1,2,3\n");
  BOOST_TEST_REQUIRE(plexus::test::run_process("gzip -k " + plexus::test::quote(bad.string())).status == 0);
  const auto refused =
      plexus::test::run_process(std::string(PLEXUS_BUILD_DIR) + "/bin/plexus data digits --csv " +
                                plexus::test::quote(bad.string() + ".gz") + " --output-prefix " +
                                plexus::test::quote((dir.path() / "c").string()));
  BOOST_TEST(refused.status != 0);
  BOOST_TEST(refused.output.find("bad.csv.gz:1: 3 values; a digits line has 65") != std::string::npos,
             refused.output);
  BOOST_TEST(!fs::exists(dir.path() / "c.mimo.json"));
}
