// WindowSampler: windows of seq_length + 1 tokens over the concatenated token stream, split
// contiguously into training and validation, shuffled per epoch identically everywhere.
// The datasets here hold token id = stream offset, so every window shows where it came from.
#define BOOST_TEST_MODULE sampler
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/core/data/sampler.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using plexus::DataError;
using plexus::data::IndexedDataset;
using plexus::data::WindowSampler;
using plexus::data::WindowSamplerOptions;

namespace {

// A dataset of `tokens` tokens whose id is their stream offset, in documents of uneven
// lengths (so windows cross document boundaries, as in GPT pretraining).
std::shared_ptr<const IndexedDataset> counting_dataset(const plexus::test::TempDir& dir, int64_t tokens,
                                                       plexus::data::TokenDtype dtype = plexus::data::TokenDtype::int32) {
  const fs::path prefix = dir.path() / ("count" + std::to_string(tokens));
  plexus::data::IndexedDatasetWriter writer(prefix, dtype);
  int64_t next = 0, length = 1;
  while (next < tokens) {
    std::vector<int64_t> document;
    for (int64_t i = 0; i < length && next < tokens; ++i) document.push_back(next++);
    writer.add_document(document);
    length = length % 37 + 5;
  }
  writer.finalize();
  return std::make_shared<const IndexedDataset>(prefix);
}

WindowSamplerOptions options(std::size_t seq_length, double split, uint64_t seed) {
  WindowSamplerOptions o;
  o.seq_length = seq_length;
  o.split = split;
  o.seed = seed;
  return o;
}

std::vector<uint64_t> starts(WindowSampler& sampler, uint64_t first, uint64_t count) {
  std::vector<uint64_t> out;
  for (uint64_t p = first; p < first + count; ++p) out.push_back(sampler.train_window_start(p));
  return out;
}

bool message_has(const std::exception& e, const std::vector<std::string>& parts) {
  const std::string message = e.what();
  BOOST_TEST_MESSAGE(message);
  return std::all_of(parts.begin(), parts.end(), [&](const std::string& p) { return message.find(p) != std::string::npos; });
}

}  // namespace

BOOST_AUTO_TEST_CASE(split_and_window_counts) {
  plexus::test::TempDir dir;
  const auto dataset = counting_dataset(dir, 1000);
  const WindowSampler sampler(dataset, options(16, 0.9, 1));
  BOOST_TEST(sampler.train_range().begin == 0u);
  BOOST_TEST(sampler.train_range().end == 900u);  // the first 90% of the tokens
  BOOST_TEST(sampler.validation_range().begin == 900u);
  BOOST_TEST(sampler.validation_range().end == 1000u);
  BOOST_TEST(sampler.train_windows_per_epoch() == 56u);  // floor((900 - 1) / 16)
  BOOST_TEST(sampler.validation_window_count() == 6u);   // floor((100 - 1) / 16)
}

BOOST_AUTO_TEST_CASE(targets_are_inputs_shifted_by_one) {
  plexus::test::TempDir dir;
  const auto dataset = counting_dataset(dir, 1000);
  WindowSampler sampler(dataset, options(16, 0.9, 7));
  const auto batch = sampler.batch(0, 4);
  BOOST_TEST_REQUIRE(batch.inputs.size() == 4u * 16u);
  for (std::size_t b = 0; b < 4; ++b) {
    const auto start = static_cast<int32_t>(sampler.train_window_start(b));
    for (std::size_t j = 0; j < 16; ++j) {
      BOOST_TEST(batch.inputs[b * 16 + j] == start + static_cast<int32_t>(j));
      BOOST_TEST(batch.targets[b * 16 + j] == start + static_cast<int32_t>(j) + 1);
    }
  }
}

BOOST_AUTO_TEST_CASE(an_epoch_visits_every_training_window_once_inside_the_training_range) {
  plexus::test::TempDir dir;
  const auto dataset = counting_dataset(dir, 1000);
  WindowSampler sampler(dataset, options(16, 0.9, 3));
  const uint64_t windows = sampler.train_windows_per_epoch();
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    auto seen = starts(sampler, epoch * windows, windows);
    std::sort(seen.begin(), seen.end());
    for (uint64_t k = 0; k < windows; ++k) BOOST_TEST(seen[k] == k * 16);  // the inputs tile the range
    // The last window's last target is inside the training range: no token of validation.
    BOOST_TEST(seen.back() + 16 < sampler.train_range().end);
    const auto order = sampler.epoch_order(epoch);
    std::vector<uint64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint64_t> identity(windows);
    std::iota(identity.begin(), identity.end(), uint64_t{0});
    BOOST_TEST(sorted == identity, boost::test_tools::per_element());
  }
  BOOST_TEST(sampler.epoch_order(0) != sampler.epoch_order(1));  // reshuffled every epoch
  // Every token a batch holds is a training token.
  const auto batch = sampler.batch(0, windows);
  for (const int32_t t : batch.targets) BOOST_TEST(t < static_cast<int32_t>(sampler.train_range().end));
}

BOOST_AUTO_TEST_CASE(validation_windows_are_fixed_in_order_and_after_the_boundary) {
  plexus::test::TempDir dir;
  const auto dataset = counting_dataset(dir, 1000);
  const WindowSampler a(dataset, options(16, 0.9, 1)), b(dataset, options(16, 0.9, 999));
  const auto first = a.validation_batch(0, a.validation_window_count());
  BOOST_TEST(first.inputs == b.validation_batch(0, b.validation_window_count()).inputs,
             boost::test_tools::per_element());  // the seed does not matter
  for (std::size_t w = 0; w < a.validation_window_count(); ++w) {
    BOOST_TEST(a.validation_window_start(w) == 900 + w * 16);
    for (std::size_t j = 0; j < 16; ++j) {
      BOOST_TEST(first.inputs[w * 16 + j] == static_cast<int32_t>(900 + w * 16 + j));
      BOOST_TEST(first.targets[w * 16 + j] == static_cast<int32_t>(900 + w * 16 + j + 1));
      BOOST_TEST(first.inputs[w * 16 + j] >= 900);  // no training token
    }
  }
  const auto later = a.validation_batch(2, 3);
  BOOST_TEST(later.inputs[0] == 900 + 32);
  BOOST_CHECK_THROW(a.validation_batch(4, 3), std::out_of_range);
  BOOST_CHECK_THROW(a.validation_window_start(6), std::out_of_range);
}

BOOST_AUTO_TEST_CASE(same_seed_same_windows_different_seed_different_windows) {
  plexus::test::TempDir dir;
  const auto dataset = counting_dataset(dir, 5000);
  WindowSampler a(dataset, options(32, 0.9, 42)), b(dataset, options(32, 0.9, 42)), c(dataset, options(32, 0.9, 43));
  const uint64_t span = 3 * a.train_windows_per_epoch();
  BOOST_TEST(starts(a, 0, span) == starts(b, 0, span), boost::test_tools::per_element());
  BOOST_TEST(a.batch(5, 8).inputs == b.batch(5, 8).inputs, boost::test_tools::per_element());
  BOOST_TEST(starts(a, 0, span) != starts(c, 0, span));
  // seed s's epoch 1 is not seed s+1's epoch 0 (the epoch seed is a mix, not seed + epoch).
  BOOST_TEST(a.epoch_order(1) != c.epoch_order(0));
}

BOOST_AUTO_TEST_CASE(resuming_at_a_position_continues_exactly) {
  plexus::test::TempDir dir;
  const auto dataset = counting_dataset(dir, 3000);
  const std::size_t batch_size = 5;
  WindowSampler through(dataset, options(24, 0.8, 11));
  const uint64_t windows = through.train_windows_per_epoch();  // 99: batches straddle epochs
  std::vector<std::vector<int32_t>> inputs, targets;
  for (uint64_t step = 0; step < 60; ++step) {
    auto batch = through.batch(step * batch_size, batch_size);
    inputs.push_back(std::move(batch.inputs));
    targets.push_back(std::move(batch.targets));
  }
  BOOST_TEST_REQUIRE(60 * batch_size > 2 * windows);
  for (const uint64_t resume_step : {uint64_t{1}, uint64_t{19}, uint64_t{20}, uint64_t{41}}) {
    WindowSampler resumed(dataset, options(24, 0.8, 11));
    for (uint64_t step = resume_step; step < 60; ++step) {
      const auto batch = resumed.batch(step * batch_size, batch_size);
      BOOST_TEST(batch.inputs == inputs[step], boost::test_tools::per_element());
      BOOST_TEST(batch.targets == targets[step], boost::test_tools::per_element());
    }
  }
  // Positions, not calls, decide: asking out of order gives the same windows.
  WindowSampler shuffled_calls(dataset, options(24, 0.8, 11));
  BOOST_TEST(shuffled_calls.batch(40 * batch_size, batch_size).inputs == inputs[40], boost::test_tools::per_element());
  BOOST_TEST(shuffled_calls.batch(3 * batch_size, batch_size).inputs == inputs[3], boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(order_is_pinned_across_platforms) {
  // std::mt19937_64 is fully specified by the standard: its 10000th output from the default
  // seed is fixed. bounded_random and the shuffle use only raw engine output, so the values
  // below are the same with every compiler and standard library. They were cross-checked
  // with an independent Python implementation of MT19937-64, the rejection rule and the
  // Fisher-Yates loop written from sampler.hpp's description.
  std::mt19937_64 reference;
  reference.discard(9999);
  BOOST_TEST(reference() == 9981545732273789042ull);

  std::mt19937_64 engine(2024);
  std::vector<uint64_t> draws;
  for (int i = 0; i < 6; ++i) draws.push_back(plexus::data::bounded_random(engine, 1000));
  BOOST_TEST_MESSAGE("bounded draws: " << draws[0] << " " << draws[1] << " " << draws[2] << " " << draws[3] << " "
                                       << draws[4] << " " << draws[5]);
  BOOST_TEST(draws == (std::vector<uint64_t>{974, 969, 181, 714, 12, 877}), boost::test_tools::per_element());
  BOOST_TEST(plexus::data::epoch_seed(0, 0) == 12035550249420947055ull);

  plexus::test::TempDir dir;
  const WindowSampler sampler(counting_dataset(dir, 1000), options(16, 0.9, 1234));
  const auto order = sampler.epoch_order(0);
  std::string listed;
  for (std::size_t i = 0; i < 10; ++i) listed += std::to_string(order[i]) + ",";
  BOOST_TEST_MESSAGE("epoch 0 order: " << listed);
  BOOST_TEST(std::vector<uint64_t>(order.begin(), order.begin() + 10) == (std::vector<uint64_t>{23, 35, 17, 42, 28, 8, 6, 9, 31, 29}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bounded_random_is_in_range_and_unbiased) {
  std::mt19937_64 engine(5);
  BOOST_TEST(plexus::data::bounded_random(engine, 1) == 0u);
  BOOST_CHECK_THROW(plexus::data::bounded_random(engine, 0), std::invalid_argument);
  const uint64_t huge = (uint64_t{1} << 63) + 1;  // rejects almost half of all draws
  for (int i = 0; i < 1000; ++i) BOOST_TEST(plexus::data::bounded_random(engine, huge) < huge);
  // Bound 3: 90000 draws, expected 30000 each; the standard deviation is ~141, so 1000 is ~7 sigma.
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 90000; ++i) ++counts[plexus::data::bounded_random(engine, 3)];
  for (const int count : counts) BOOST_TEST(std::abs(count - 30000) < 1000);
}

BOOST_AUTO_TEST_CASE(a_split_shorter_than_a_window_is_an_error_naming_dataset_tokens_and_seq_length) {
  plexus::test::TempDir dir;
  const auto dataset = counting_dataset(dir, 100);
  const std::string name = dataset->prefix().string();
  BOOST_CHECK_EXCEPTION(WindowSampler(dataset, options(95, 0.9, 1)), DataError, [&](const DataError& e) {
    return message_has(e, {name, "training split", "100 tokens: 90", "seq_length + 1 = 96", "seq_length 95"});
  });
  BOOST_CHECK_EXCEPTION(WindowSampler(dataset, options(20, 0.9, 1)), DataError, [&](const DataError& e) {
    return message_has(e, {name, "validation split (the last 10% of its 100 tokens: 10)", "seq_length 20"});
  });
  // split 1: no validation, and that is not an error.
  const WindowSampler all_train(dataset, options(20, 1.0, 1));
  BOOST_TEST(all_train.validation_window_count() == 0u);
  BOOST_TEST(all_train.train_windows_per_epoch() == 4u);  // floor(99 / 20)
  BOOST_CHECK_THROW(all_train.validation_batch(0, 1), std::out_of_range);
  BOOST_CHECK_EXCEPTION(WindowSampler(dataset, options(100, 1.0, 1)), DataError,
                        [&](const DataError& e) { return message_has(e, {"100 tokens: 100", "seq_length 100"}); });
}

BOOST_AUTO_TEST_CASE(bad_options_and_buffers) {
  plexus::test::TempDir dir;
  const auto dataset = counting_dataset(dir, 100);
  BOOST_CHECK_THROW(WindowSampler(dataset, options(0, 0.9, 1)), DataError);
  BOOST_CHECK_THROW(WindowSampler(dataset, options(4, 0.0, 1)), DataError);
  BOOST_CHECK_THROW(WindowSampler(dataset, options(4, 1.5, 1)), DataError);
  BOOST_CHECK_THROW(WindowSampler(dataset, options(4, std::nan(""), 1)), DataError);
  BOOST_CHECK_THROW(WindowSampler(nullptr, options(4, 0.9, 1)), std::invalid_argument);
  WindowSampler sampler(dataset, options(4, 0.9, 1));
  std::vector<int32_t> inputs(8), targets(7);
  BOOST_CHECK_THROW(sampler.batch(0, 2, inputs, targets), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(tokens_outside_the_vocabulary_or_int32_are_refused) {
  plexus::test::TempDir dir;
  const auto dataset = counting_dataset(dir, 1000);
  WindowSamplerOptions o = options(16, 1.0, 1);
  o.vocab_size = 500;
  WindowSampler sampler(dataset, o);
  // Some window in the epoch holds ids >= 500.
  BOOST_CHECK_EXCEPTION(sampler.batch(0, sampler.train_windows_per_epoch()), DataError, [&](const DataError& e) {
    return message_has(e, {dataset->prefix().string(), "is outside the vocabulary [0, 500)"});
  });

  const fs::path prefix = dir.path() / "wide";
  {
    plexus::data::IndexedDatasetWriter writer(prefix, plexus::data::TokenDtype::int64);
    writer.add_document(std::vector<int64_t>{1, 2, int64_t{1} << 40, 4, 5});
    writer.finalize();
  }
  WindowSampler wide(std::make_shared<const IndexedDataset>(prefix), options(4, 1.0, 1));
  BOOST_CHECK_EXCEPTION(wide.batch(0, 1), DataError, [](const DataError& e) {
    return message_has(e, {"token id 1099511627776 at token offset 2", "int32"});
  });
}
