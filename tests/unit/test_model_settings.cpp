// The model settings derived from a run config: model.ffn_hidden_size = 0 gives Megatron-LM's
// default MLP width (megatron/training/arguments.py), 4 * hidden_size, or with --swiglu
// int((4 * hidden_size * 2 / 3) / 64) * 64.
#define BOOST_TEST_MODULE model_settings
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "plexus/core/config.hpp"
#include "plexus/core/engine/model.hpp"
#include "plexus/core/run_config.hpp"

namespace {

plexus::ModelSettings settings(const std::vector<std::string>& overrides) {
  return plexus::ModelSettings::from_run_config(plexus::load_run_config(std::nullopt, overrides));
}

int64_t ffn(int64_t hidden, const std::string& activation) {
  return settings({"model.hidden_size=" + std::to_string(hidden), "model.num_attention_heads=1",
                   "model.activation=\"" + activation + "\""})
      .ffn_hidden_size;
}

}  // namespace

BOOST_AUTO_TEST_CASE(swiglu_default_is_megatrons) {
  // hidden_size -> int((4 * h * 2 / 3) / 64) * 64, evaluated by Python 3 (Megatron's expression).
  const std::vector<std::pair<int64_t, int64_t>> megatron{
      {24, 64},     {32, 64},      {47, 64},      {48, 128},     {64, 128},    {100, 256},
      {128, 320},   {256, 640},    {512, 1344},   {768, 2048},   {1000, 2624}, {1024, 2688},
      {2048, 5440}, {4096, 10880}, {5120, 13632}, {7168, 19072}, {8192, 21824}};
  for (const auto& [hidden, expected] : megatron)
    BOOST_TEST(ffn(hidden, "swiglu") == expected, "hidden " << hidden);
}

BOOST_AUTO_TEST_CASE(gelu_default_is_four_times_hidden) {
  for (const int64_t hidden : {1, 32, 128, 4096}) BOOST_TEST(ffn(hidden, "gelu") == 4 * hidden);
}

BOOST_AUTO_TEST_CASE(an_explicit_width_is_kept) {
  BOOST_TEST(settings({"model.activation=\"swiglu\"", "model.ffn_hidden_size=40"}).ffn_hidden_size == 40);
  BOOST_TEST(settings({"model.ffn_hidden_size=40"}).ffn_hidden_size == 40);
  // Layers read the derived width.
  BOOST_TEST(settings({"model.activation=\"swiglu\""}).layer_config.at("ffn_hidden_size") == 320);
}

// Below hidden_size 24 Megatron's SwiGLU rule gives 0: refused, naming the key.
BOOST_AUTO_TEST_CASE(a_zero_swiglu_default_is_refused_naming_the_key) {
  try {
    (void)ffn(16, "swiglu");
    BOOST_FAIL("expected a ConfigError");
  } catch (const plexus::config::ConfigError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("model.ffn_hidden_size") != std::string::npos, what);
    BOOST_TEST(what.find("16") != std::string::npos, what);
  }
}
