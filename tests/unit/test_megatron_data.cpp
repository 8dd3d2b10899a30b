// Megatron's data pipeline as Plexus rebuilds it (data/numpy_random.hpp, gpt_dataset.hpp,
// blended_dataset.hpp): numpy's RandomState and sum bit for bit (expected values printed by
// numpy 1.24), the split string, the sample index's cut of the documents, the shuffle, the
// blend's proportions, and the index cache. Token-for-token agreement with megatron-core's own
// code is integration.test_megatron_data.
#define BOOST_TEST_MODULE megatron_data
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <numeric>
#include <set>

#include "plexus/core/data/blended_dataset.hpp"
#include "plexus/core/data/numpy_random.hpp"
#include "temp_dir.hpp"

namespace data = plexus::data;
using plexus::test::TempDir;

namespace {

// A dataset of `documents` documents, document d holding 5 + 3 * (d % 7) tokens, token t of
// document d = 1000 * d + t (so a sample names where each of its tokens came from).
std::filesystem::path write_dataset(const TempDir& dir, const std::string& name, int documents) {
  const auto prefix = dir.path() / name;
  data::IndexedDatasetWriter writer(prefix, data::TokenDtype::int32);
  for (int d = 0; d < documents; ++d) {
    std::vector<int64_t> tokens(static_cast<std::size_t>(5 + 3 * (d % 7)));
    for (std::size_t t = 0; t < tokens.size(); ++t) tokens[t] = 1000 * d + static_cast<int64_t>(t);
    writer.add_document(std::span<const int64_t>(tokens));
  }
  writer.finalize();
  return prefix;
}

}  // namespace

BOOST_AUTO_TEST_CASE(random_state_shuffles_as_numpy) {
  std::vector<int> a(10);
  std::iota(a.begin(), a.end(), 0);
  data::NumpyRandomState(1234).shuffle(std::span<int>(a));
  BOOST_TEST(a == (std::vector<int>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}), boost::test_tools::per_element());
  std::vector<int32_t> b(1000);
  std::iota(b.begin(), b.end(), 0);
  data::NumpyRandomState(7).shuffle(std::span<int32_t>(b));
  BOOST_TEST(std::vector<int32_t>(b.begin(), b.begin() + 8) ==
                 (std::vector<int32_t>{778, 334, 271, 802, 216, 408, 812, 94}),
             boost::test_tools::per_element());
  BOOST_TEST(std::vector<int32_t>(b.end() - 4, b.end()) == (std::vector<int32_t>{502, 537, 196, 175}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(sum_and_normalize_round_as_numpy) {
  std::vector<double> w;
  for (int i = 0; i < 300; ++i) w.push_back(0.1 * (i % 7) + 0.01 * i);
  // numpy's pairwise sum and a plain loop differ in the last bit here.
  BOOST_TEST(data::numpy_sum(w) == 0x1.0d1999999999ap+9);
  BOOST_TEST(std::accumulate(w.begin(), w.end(), 0.0) != 0x1.0d1999999999ap+9);
  const std::vector<double> n = data::normalize_weights(std::vector<double>{0.3, 0.7, 0.1});
  BOOST_TEST(n[0] == 0x1.1745d1745d174p-2);
  BOOST_TEST(n[1] == 0x1.45d1745d1745cp-1);
  BOOST_TEST(n[2] == 0x1.745d1745d1746p-4);
}

BOOST_AUTO_TEST_CASE(split_strings_read_as_megatron) {
  const data::SplitMatrix m = data::parse_split("969, 30, 1");
  BOOST_TEST_REQUIRE((m[0] && m[1] && m[2]));
  BOOST_TEST(m[0]->begin == 0.0);
  BOOST_TEST(m[0]->end == 0.969);
  BOOST_TEST(m[1]->end == m[0]->end + 0.03);
  BOOST_TEST(m[2]->end == 1.0, boost::test_tools::tolerance(1e-15));
  const data::SplitMatrix two = data::parse_split("99,1");  // missing shares are 0
  BOOST_TEST((two[0] && two[1] && !two[2]));
  const data::SplitMatrix no_valid = data::parse_split("1,0,1");
  BOOST_TEST((no_valid[0] && !no_valid[1] && no_valid[2]));
  BOOST_CHECK_THROW(data::parse_split("1,2,3,4"), std::invalid_argument);
  BOOST_CHECK_THROW(data::parse_split("0,0,0"), std::invalid_argument);
  BOOST_CHECK_THROW(data::parse_split("1.2.3"), std::invalid_argument);
}

// Each sample is seq_length + 1 consecutive tokens of the shuffled documents laid end to end;
// consecutive samples (in index order) share one token; the shuffle is a permutation.
BOOST_AUTO_TEST_CASE(samples_cut_the_shuffled_documents_end_to_end) {
  const std::vector<int32_t> lengths{5, 9, 3, 12, 7, 4, 8, 6};
  data::GptIndexParams p;
  p.first_sequence = 1;
  p.end_sequence = 7;  // sequences 1..6: 43 tokens an epoch
  p.seq_length = 6;
  p.seed = 3;
  p.num_samples = 15;  // 15 * 6 + 1 = 91 tokens: three epochs
  const data::GptIndices in = data::build_gpt_indices(lengths, p);
  BOOST_TEST(in.document_index.size() == 18U);
  for (int32_t s : in.document_index) BOOST_TEST((s >= 1 && s <= 6));
  const uint64_t samples = (3 * 43 - 1) / 6;
  BOOST_TEST_REQUIRE(in.sample_index.size() == 2 * (samples + 1));
  std::vector<int64_t> stream;  // (sequence, offset) of every token, documents in index order
  for (int32_t s : in.document_index)
    for (int32_t t = 0; t < lengths[static_cast<std::size_t>(s)]; ++t) stream.push_back(s * 100 + t);
  std::vector<int64_t> starts;
  for (uint64_t k = 0; k <= samples; ++k) {
    int64_t at = 0;
    for (int64_t d = 0; d < in.sample_index[2 * k]; ++d)
      at += lengths[static_cast<std::size_t>(in.document_index[static_cast<std::size_t>(d)])];
    starts.push_back(at + in.sample_index[2 * k + 1]);
  }
  for (uint64_t k = 0; k < samples; ++k) BOOST_TEST(starts[k + 1] - starts[k] == 6);
  BOOST_TEST(starts.back() + 1 <= static_cast<int64_t>(stream.size()));
  std::set<int64_t> order(in.shuffle_index.begin(), in.shuffle_index.end());
  BOOST_TEST(order.size() == samples);
  BOOST_TEST(*order.rbegin() == static_cast<int64_t>(samples - 1));
  BOOST_CHECK_THROW(data::build_gpt_indices(lengths, {2, 3, std::nullopt, 6, 0}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(blends_follow_their_weights_in_every_prefix) {
  std::vector<int16_t> which;
  std::vector<int64_t> nth;
  data::build_blending_indices(std::vector<double>{0.3, 0.7}, 100, which, nth);
  int64_t taken[2] = {0, 0};
  for (std::size_t i = 0; i < which.size(); ++i) {
    BOOST_TEST(nth[i] == taken[which[i]]);  // each dataset's samples in order
    ++taken[which[i]];
    BOOST_TEST(std::abs(static_cast<double>(taken[0]) - 0.3 * static_cast<double>(i + 1)) <= 1.0);
  }
  BOOST_TEST(taken[0] == 30);
  BOOST_TEST(which[0] == 1);  // the larger weight is furthest behind at first
}

BOOST_AUTO_TEST_CASE(datasets_blend_cache_and_refuse_what_does_not_fit) {
  TempDir dir;
  const auto a = write_dataset(dir, "a", 300);
  const auto b = write_dataset(dir, "b", 200);
  data::MegatronDataConfig config;
  config.blend = {{a.string(), b.string()}, {0.25, 0.75}};
  config.split = data::parse_split("90,10,0");
  config.sizes = {400, 40, std::nullopt};
  config.seq_length = 16;
  config.seed = 1234;
  config.cache_dir = dir.path() / "cache";
  const auto splits = data::build_megatron_datasets(config);
  BOOST_TEST_REQUIRE((splits[0] && splits[1] && !splits[2]));
  BOOST_TEST(splits[0]->size() == 400U);  // ceil(0.25 * 400) + ceil(0.75 * 400)
  std::vector<int64_t> sample(17);
  for (uint64_t i = 0; i < 400; ++i) {
    splits[0]->sample(i, sample);
    for (int64_t token : sample) BOOST_TEST((token % 1000) < 23);  // every token a real one
  }
  BOOST_TEST(splits[0]->datasets()[0].size() >= 100U);  // built for its share and the surplus
  BOOST_TEST(splits[0]->datasets()[1].size() >= 300U);
  // The validation split reads documents 270.. of a and 180.. of b only.
  for (uint64_t i = 0; i < splits[1]->size(); ++i) {
    splits[1]->sample(i, sample);
    BOOST_TEST(sample[0] / 1000 >= 180);
  }
  // Built again: from the cache, the same samples.
  const auto again = data::build_megatron_datasets(config);
  BOOST_TEST(again[0]->datasets()[0].from_cache());
  std::vector<int64_t> other(17);
  for (uint64_t i = 0; i < 400; i += 37) {
    splits[0]->sample(i, sample);
    again[0]->sample(i, other);
    BOOST_TEST(sample == other, boost::test_tools::per_element());
  }
  // A dataset rewritten in place does not match its cache.
  write_dataset(dir, "a", 290);
  BOOST_TEST(!data::build_megatron_datasets(config)[0]->datasets()[0].from_cache());
  // A split too small for one sample names the dataset and its split.
  config.split = data::parse_split("999,1,0");
  config.seq_length = 64;
  try {
    data::build_megatron_datasets(config);
    BOOST_FAIL("a validation split of one document was accepted");
  } catch (const plexus::DataError& e) {
    BOOST_TEST(std::string(e.what()).find("valid split of " + a.string()) != std::string::npos, e.what());
  }
}
