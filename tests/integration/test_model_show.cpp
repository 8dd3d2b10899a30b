// `plexus model show --json`: the FLOPs per token it reports are the work the model computes.
// Causal attention counts the S (S + 1) / 2 query-key pairs the mask keeps, not the full square;
// under mHC every decoder sublayer also counts its connection's products, n C (n + 1)(n + 2)
// multiply-adds forward and twice that backward. Both are checked through differences, so the
// projections' shares (tested per layer in unit.test_transformer_contract) cancel out.
#define BOOST_TEST_MODULE model_show
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <string>

#include "run_process.hpp"
#include "train_corpus.hpp"

using plexus::test::kBin;
using plexus::test::run_process;

namespace {

const std::string kModel =
    " --set model.num_layers=2 --set model.hidden_size=32 --set model.num_attention_heads=4"
    " --set train.micro_batch_size=1";
const std::string kMhc =
    " --set mhc.enabled=true --set mhc.num_residual_streams=4 --set mhc.backend=mhc_fused"
    " --set 'plugins.load=[\"sequential_scheduler\", \"transformer\", \"mhc_fused\"]'";

boost::json::object show(const std::string& extra) {
  const auto shown = run_process(kBin + "plexus model show --json" + kModel + extra + " 2>/dev/null");
  BOOST_TEST_REQUIRE(shown.status == 0, shown.output);
  return boost::json::parse(shown.output).as_object();
}

// The FLOPs per token of the decoder's first unit whose component is `component`.
double unit_flops(const boost::json::object& shown, const std::string& component) {
  for (const auto& unit : shown.at("units").as_array()) {
    const auto& u = unit.as_object();
    if (u.at("kind").as_string() == "decoder" && u.at("component").as_string() == component)
      return u.at("flops_per_token").to_number<double>();
  }
  BOOST_FAIL("no decoder unit " + component);
  return 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(causal_attention_counts_the_pairs_the_mask_keeps) {
  const auto s16 = show(" --set model.seq_length=16");
  const auto s32 = show(" --set model.seq_length=32");
  // Per token, QK^T and PV cost 2 * 2 * C * (S + 1) / 2 forward (C = heads x head_dim = 32),
  // three times that with backward: going from S = 16 to 32 adds 6 * 32 * 16 = 3072. The full
  // square would add twice as much.
  const double added = unit_flops(s32, "transformer.attention") - unit_flops(s16, "transformer.attention");
  BOOST_TEST(added == 3072.0, boost::test_tools::tolerance(1e-12));
  // The MLP does not depend on the sequence length.
  BOOST_TEST(unit_flops(s32, "transformer.mlp") == unit_flops(s16, "transformer.mlp"),
             boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(mhc_connections_count_their_products) {
  const auto plain = show(" --set model.seq_length=16");
  const auto mhc = show(" --set model.seq_length=16" + kMhc);
  // n = 4, C = 32: 3 * 2 * 4 * 32 * 5 * 6 = 23040 per sublayer and token.
  for (const char* component : {"transformer.attention", "transformer.mlp"})
    BOOST_TEST(unit_flops(mhc, component) - unit_flops(plain, component) == 23040.0,
               boost::test_tools::tolerance(1e-12));
  // Two layers of two sublayers each.
  BOOST_TEST(
      mhc.at("flops_per_token").to_number<double>() - plain.at("flops_per_token").to_number<double>() ==
          4 * 23040.0,
      boost::test_tools::tolerance(1e-12));
}

// MTP depths: every unit of a depth is on the last pipeline stage whatever its layers' numbers
// within the depth, and the depth's FLOPs count in the model's (its layers, entry and head are
// trained work).
BOOST_AUTO_TEST_CASE(mtp_depths_sit_on_the_last_stage) {
  const auto shown = show(" --set model.seq_length=16 --set model.mtp_num_layers=1 --pp 2");
  const auto plain = show(" --set model.seq_length=16 --pp 2");
  int mtp_units = 0;
  double mtp_flops = 0;
  for (const auto& unit : shown.at("units").as_array()) {
    const auto& u = unit.as_object();
    if (u.at("mtp_depth").as_int64() != 1) continue;
    ++mtp_units;
    mtp_flops += u.at("flops_per_token").to_number<double>();
    BOOST_TEST(u.at("pipeline_stage").as_int64() == 1, u.at("label").as_string());
  }
  BOOST_TEST(mtp_units == 6);  // embedding, entry, attention, MLP, final norm, head
  BOOST_TEST(
      shown.at("flops_per_token").to_number<double>() - plain.at("flops_per_token").to_number<double>() ==
          mtp_flops,
      boost::test_tools::tolerance(1e-12));
}

// --tp N: each tensor-parallel rank's parameters. The default GPT (hidden 32, MLP 128, the byte
// vocabulary 256, RMSNorm): everything is split but the norms, 2 * 32 per layer and 32 for the
// final norm, so a rank of 4 holds (whole - norms) / 4 + norms; the vocabulary 256 is a multiple
// of 4 (no padding). With a vocabulary of 250, make_vocab_size_divisible_by 128 pads it to 256 at
// tp 1 and 512 at tp 4 (Megatron's rule: a multiple of 128 x tp), which the whole count shows.
BOOST_AUTO_TEST_CASE(tp_shows_what_each_rank_holds) {
  const auto whole = show(" --set model.seq_length=16");
  const auto split = show(" --set model.seq_length=16 --tp 4");
  const int64_t parameters = whole.at("parameters").to_number<int64_t>();
  BOOST_TEST(split.at("parameters").to_number<int64_t>() == parameters);
  const int64_t norms = 2 * 2 * 32 + 32;
  BOOST_TEST(split.at("parameters_per_tp_rank").to_number<int64_t>() == (parameters - norms) / 4 + norms);
  BOOST_TEST(split.at("bytes_per_tp_rank").to_number<int64_t>() ==
             16 * split.at("parameters_per_tp_rank").to_number<int64_t>());
  for (const auto& unit : split.at("units").as_array())
    BOOST_TEST(unit.as_object().contains("parameters_per_tp_rank"));

  const std::string padded =
      " --set model.seq_length=16 --set model.vocab_size=250"
      " --set model.make_vocab_size_divisible_by=128";
  BOOST_TEST(show(padded).at("padded_vocab_size").to_number<int64_t>() == 256);
  const auto padded4 = show(padded + " --tp 4");
  BOOST_TEST(padded4.at("padded_vocab_size").to_number<int64_t>() == 512);
  // The tied embedding grows by 256 rows of 32.
  BOOST_TEST(padded4.at("parameters").to_number<int64_t>() ==
             show(padded).at("parameters").to_number<int64_t>() + 256 * 32);
}

// The activations a training microbatch keeps: the units' estimates and the streams add up to the
// total; at cp 4 a rank's attention keeps no S x S probabilities, so it holds less than a quarter
// of one rank's whole-sequence activations; a sequence that does not cut into 2 cp chunks, and a
// cp the Mamba-2 heads do not divide over, are refused naming the key.
BOOST_AUTO_TEST_CASE(activations_per_rank_at_a_cp_size) {
  const std::string long_sequence = " --set model.seq_length=256";
  const auto one = show(long_sequence);
  const auto four = show(long_sequence + " --cp 4");
  for (const auto* shown : {&one, &four}) {
    double units = 0;
    for (const auto& unit : shown->at("units").as_array())
      units += unit.as_object().at("activation_bytes").to_number<double>();
    BOOST_TEST(units + shown->at("stream_activation_bytes").to_number<double>() ==
                   shown->at("activation_bytes_per_microbatch").to_number<double>(),
               boost::test_tools::tolerance(1e-12));
  }
  const double whole = one.at("activation_bytes_per_microbatch").to_number<double>();
  const double quarter = four.at("activation_bytes_per_microbatch").to_number<double>();
  BOOST_TEST(four.at("context_parallel_size").to_number<int64_t>() == 4);
  BOOST_TEST(quarter < whole / 4, quarter << " against " << whole);
  // Attention's probabilities: 2 layers x 4 heads x 256 x 256 float32 at cp 1, 8 KiB of
  // log-sum-exps per layer at cp 4 (what else a layer keeps is per token).
  const auto attention = [](const boost::json::object& shown) {
    for (const auto& unit : shown.at("units").as_array())
      if (unit.as_object().at("component").as_string() == "transformer.attention")
        return unit.as_object().at("activation_bytes").to_number<double>();
    return 0.0;
  };
  BOOST_TEST(attention(one) - 4 * attention(four) == 4.0 * 4 * 256 * 256 - 4 * 8.0 * 4 * 64,
             boost::test_tools::tolerance(1e-12));
  const auto text = run_process(kBin + "plexus model show" + kModel + long_sequence + " --cp 4 2>&1");
  BOOST_TEST(text.status == 0, text.output);
  BOOST_TEST(text.output.find(
                 "activations of one training microbatch on a rank (1 x 256 tokens, cp 4: 1 x 64 a rank)") !=
                 std::string::npos,
             text.output);
  const auto odd =
      run_process(kBin + "plexus model show" + kModel + " --set model.seq_length=20 --cp 4 2>&1");
  BOOST_TEST(odd.status != 0);
  BOOST_TEST(odd.output.find("model.seq_length (20)") != std::string::npos, odd.output);
  BOOST_TEST(odd.output.find("multiple of 8") != std::string::npos, odd.output);
  const auto mamba = run_process(
      kBin + "plexus model show" + kModel +
      " --set 'plugins.load=[\"sequential_scheduler\",\"transformer\",\"hybrid_stack\",\"mamba\"]'"
      " --set model.pattern=M- --set 'model.mamba.options={\"mamba_head_dim\": 8, \"mamba_num_groups\": 2}' "
      "--cp 4 2>&1");
  BOOST_TEST(mamba.status != 0);
  BOOST_TEST(mamba.output.find("mamba_num_groups (2) is not divisible by the 4 ranks of the cp group") !=
                 std::string::npos,
             mamba.output);
}

// MoE layers at --tp: the experts split over expert_tp (= tp, the default), so a rank holds half
// of each expert's fc1 rows and fc2 columns; the router and the pre-norm stay whole.
BOOST_AUTO_TEST_CASE(tp_splits_the_experts) {
  const std::string moe =
      " --set model.seq_length=16 --set 'plugins.load=[\"sequential_scheduler\",\"transformer\",\"moe\"]'"
      " --set model.moe.layer_freq=1 --set 'model.moe.options={\"num_moe_experts\": 4}'";
  const auto split = show(moe + " --tp 2");
  int moe_units = 0;
  for (const auto& unit : split.at("units").as_array()) {
    const auto& u = unit.as_object();
    if (u.at("component").as_string() != "moe.layer") continue;
    ++moe_units;
    // 4 experts of fc1 [128, 32] and fc2 [32, 128] (GeLU, ffn_hidden_size 4 x 32): half on a rank.
    BOOST_TEST(u.at("parameters").to_number<int64_t>() -
                   u.at("parameters_per_tp_rank").to_number<int64_t>() ==
               4 * 128 * 32);
  }
  BOOST_TEST(moe_units == 2);
}

// A MIMO config shows every module: the encoder under its name (its patch embedding's products
// unknown to the engine, which does not know the pixels' shape; the rest counted), then the
// language model, which is the model section shown alone. The language model's 21-token
// sequences are odd: at cp 1 nothing is cut, so any length is shown.
BOOST_AUTO_TEST_CASE(a_mimo_config_shows_every_module) {
  const std::string config = " --config " + std::string(PLEXUS_SOURCE_DIR) + "/configs/mimo_digits.json";
  const auto shown = run_process(kBin + "plexus model show --json" + config + " 2>/dev/null");
  BOOST_TEST_REQUIRE(shown.status == 0, shown.output);
  const auto modules = boost::json::parse(shown.output).at("modules").as_array();
  BOOST_TEST_REQUIRE(modules.size() == 2u);
  const auto& images = modules[0].as_object();
  const auto& language = modules[1].as_object();
  BOOST_TEST(images.at("module") == "images");
  BOOST_TEST(language.at("module") == "language");
  const auto& units = images.at("units").as_array();
  BOOST_TEST(units.front().at("component") == "vision.patch_embedding");
  BOOST_TEST(units.front().at("flops_per_token").is_null());
  BOOST_TEST(units.back().at("component") == "vision.projection");
  BOOST_TEST(units.back().at("flops_per_token").to_number<double>() > 0.0);
  BOOST_TEST(images.at("flops_per_token").is_null());

  const auto alone =
      run_process(kBin + "plexus model show --json" + config + " --set 'mimo.modules=[]' 2>/dev/null");
  BOOST_TEST_REQUIRE(alone.status == 0, alone.output);
  const auto lm = boost::json::parse(alone.output).as_object();
  BOOST_TEST(language.at("parameters") == lm.at("parameters"));
  BOOST_TEST(language.at("flops_per_token") == lm.at("flops_per_token"));
  BOOST_TEST(language.at("activation_bytes_per_microbatch").to_number<double>() > 0.0);
}
