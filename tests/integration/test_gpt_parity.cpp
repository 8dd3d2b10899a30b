// Whole-model parity with a PyTorch reference (tests/reference/gpt_reference.py, run with the
// system python and Debian's python3-torch): the same weights (handed over as a safetensors
// file), the same microbatches; the loss, every gradient, and the losses of 10 AdamW steps.
// Reported skipped by ctest (exit 77), not passed, where /usr/bin/python3 cannot import torch.
#define BOOST_TEST_MODULE gpt_parity
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>

#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/engine/model.hpp"
#include "plexus/core/engine/optimizer.hpp"
#include "plexus/core/run_config.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "temp_dir.hpp"

namespace {

const std::string kPython = "/usr/bin/python3";

bool torch_available() {
  return plexus::test::run_process(kPython + " -c 'import torch'").status == 0;
}

std::span<const std::byte> bytes_of(const plexus::Tensor& t) {
  return {static_cast<const std::byte*>(t.raw()), t.bytes()};
}

struct Setup {
  boost::json::value run_config;
  plexus::PluginHost host;
  explicit Setup(const std::vector<std::string>& overrides) {
    std::vector<std::string> all = {"model.vocab_size=50",         "model.hidden_size=32",
                                    "model.num_layers=2",          "model.num_attention_heads=4",
                                    "model.ffn_hidden_size=40",    "model.seq_length=16",
                                    "optimizer.lr=0.01",           "optimizer.min_lr=0.001",
                                    "optimizer.lr_warmup_steps=3", "train.steps=10",
                                    "optimizer.clip_grad=0.5"};
    all.insert(all.end(), overrides.begin(), overrides.end());
    run_config = plexus::load_run_config(std::nullopt, all);
    plexus::load_configured_plugins(host, run_config,
                                    {{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false});
    plexus::check_components(host, run_config);
  }
};

// Error of a tensor against the reference, scaled by the reference's largest value (per-element
// relative error is meaningless for gradients near zero) or, when the whole tensor's gradient is
// tiny, by `floor`. A gradient that is mathematically ~0 (e.g. that of alpha_res in a layer whose
// streams are still identical copies, where any doubly stochastic mix is the identity) comes out
// of float32 as rounding noise of the terms that cancel, on both sides; the floor, 1e-3 of the
// model's largest gradient element, keeps that noise from counting as a mismatch.
double scaled_error(const float* ours, const float* ref, std::size_t n, double floor) {
  double max_diff = 0, max_ref = floor;
  for (std::size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(ours[i]) - ref[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
  }
  return max_diff / max_ref;
}

void check_parity(const std::vector<std::string>& overrides) {
  Setup setup(overrides);
  plexus::Model model(setup.host, setup.run_config);
  model.initialize(7);
  const auto& settings = model.settings();
  const int64_t microbatches = 2, batch = 2, seq = settings.seq_length;

  // Random tokens and targets; some targets are -1 (ignored by the loss).
  std::mt19937 gen(11);
  std::vector<plexus::Batch> batches;
  plexus::Tensor all_tokens({microbatches, batch, seq}, plx_dtype_i32());
  plexus::Tensor all_targets({microbatches, batch, seq}, plx_dtype_i32());
  for (int64_t mb = 0; mb < microbatches; ++mb) {
    plexus::Batch b{plexus::Tensor({batch, seq}, plx_dtype_i32()),
                    plexus::Tensor({batch, seq}, plx_dtype_i32())};
    for (int64_t i = 0; i < batch * seq; ++i) {
      const auto token = static_cast<int32_t>(gen() % static_cast<unsigned>(settings.vocab_size));
      const auto target =
          i % 7 == 3 ? -1 : static_cast<int32_t>(gen() % static_cast<unsigned>(settings.vocab_size));
      b.tokens.data<int32_t>()[i] = token;
      b.targets.data<int32_t>()[i] = target;
      all_tokens.data<int32_t>()[mb * batch * seq + i] = token;
      all_targets.data<int32_t>()[mb * batch * seq + i] = target;
    }
    batches.push_back(std::move(b));
  }

  plexus::test::TempDir dir;
  plexus::checkpoint::SafetensorsWriter weights;
  boost::json::array no_decay;
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const plexus::Parameter& p = model.parameters()[i];
    weights.add(p.name, plexus::checkpoint::DType::f32, p.value.shape(), bytes_of(p.value));
    if (!p.decays()) no_decay.emplace_back(p.name);
  }
  weights.write(dir.path() / "init.safetensors");
  plexus::checkpoint::SafetensorsWriter batch_file;
  batch_file.add("tokens", plexus::checkpoint::DType::i32, all_tokens.shape(), bytes_of(all_tokens));
  batch_file.add("targets", plexus::checkpoint::DType::i32, all_targets.shape(), bytes_of(all_targets));
  batch_file.write(dir.path() / "batch.safetensors");
  boost::json::object model_spec = settings.layer_config;
  // The attention's own option (model.attention.options, default-filled by the checks), which the
  // reference reads from its model section.
  if (const boost::json::value* attention = setup.run_config.at("model").as_object().if_contains("attention"))
    if (const boost::json::value* mask = attention->at("options").as_object().if_contains("attn_mask_type"))
      model_spec["attn_mask_type"] = *mask;
  const boost::json::object spec{
      {"model", model_spec},
      {"no_decay", no_decay},
      {"optimizer", setup.run_config.at("optimizer")},
      {"steps", 10},
      {"mhc", setup.run_config.at("mhc")},
      {"mtp", {{"depths", model.plan().mtp_depths}, {"scaling_factor", settings.mtp_loss_scaling_factor}}}};
  std::ofstream(dir.path() / "spec.json") << boost::json::serialize(spec);

  // Ours: one step's loss and gradients, then 10 AdamW steps on the same microbatches.
  const plexus::SchedulerInstance scheduler(setup.host.get(PLX_KIND_SCHEDULER, "sequential"), nullptr);
  plexus::AdamW adam(model.parameters(), plexus::OptimizerSettings::from_run_config(setup.run_config));
  std::vector<double> losses;
  std::vector<std::vector<float>> first_grads;
  for (int64_t step = 0; step < 10; ++step) {
    model.parameters().zero_grads();
    losses.push_back(model.forward_backward(scheduler, batches));
    if (step == 0)
      for (std::size_t i = 0; i < model.parameters().size(); ++i) {
        const plexus::Tensor& g = model.parameters()[i].grad;
        first_grads.emplace_back(g.data<float>(), g.data<float>() + g.numel());
      }
    adam.step(step);
  }

  const std::string script = std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/gpt_reference.py";
  const auto ref_run = plexus::test::run_process(
      kPython + " " + plexus::test::quote(script) + " --spec " +
      plexus::test::quote((dir.path() / "spec.json").string()) + " --weights " +
      plexus::test::quote((dir.path() / "init.safetensors").string()) + " --batch " +
      plexus::test::quote((dir.path() / "batch.safetensors").string()) + " --out " +
      plexus::test::quote((dir.path() / "ref.safetensors").string()));
  BOOST_TEST_REQUIRE(ref_run.status == 0, ref_run.output);
  const auto ref = plexus::checkpoint::SafetensorsFile::open(dir.path() / "ref.safetensors");

  // fp32 against fp32 with different summation orders: the loss agrees to ~1e-6 relative;
  // 1e-5 (the issue's bar) leaves a margin of 10.
  const double ref_loss = reinterpret_cast<const double*>(ref.tensor("loss").bytes.data())[0];
  BOOST_TEST(losses[0] == ref_loss, boost::test_tools::tolerance(1e-5));
  // Gradients pass through more reductions; 1e-4 of each tensor's largest element.
  double largest = 0;
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const auto view = ref.tensor("grad/" + model.parameters()[i].name);
    const auto* g = reinterpret_cast<const float*>(view.bytes.data());
    for (std::size_t k = 0; k < view.bytes.size() / sizeof(float); ++k)
      largest = std::max(largest, std::abs(static_cast<double>(g[k])));
  }
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const std::string& name = model.parameters()[i].name;
    const auto view = ref.tensor("grad/" + name);
    BOOST_TEST_REQUIRE(view.bytes.size() == first_grads[i].size() * sizeof(float), name);
    const double err = scaled_error(first_grads[i].data(), reinterpret_cast<const float*>(view.bytes.data()),
                                    first_grads[i].size(), 1e-3 * largest);
    BOOST_TEST(err < 1e-4, "gradient of " << name << ": scaled error " << err << " (ours[0] "
                                          << first_grads[i][0] << ", torch[0] "
                                          << reinterpret_cast<const float*>(view.bytes.data())[0] << ")");
  }
  // Ten optimizer steps compound tiny differences; 1e-4 relative per loss is the bar.
  const auto* ref_losses = reinterpret_cast<const double*>(ref.tensor("losses").bytes.data());
  for (std::size_t s = 0; s < losses.size(); ++s) {
    const double rel = std::abs(losses[s] - ref_losses[s]) / std::abs(ref_losses[s]);
    BOOST_TEST(rel < 1e-4, "step " << s << ": ours " << losses[s] << ", torch " << ref_losses[s]);
  }
  BOOST_TEST(losses.back() < losses.front());  // the run actually trains
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(torch_available(), "/usr/bin/python3 cannot import torch (Debian: python3-torch)")

BOOST_AUTO_TEST_CASE(rmsnorm_gelu_mha_tied) {
  check_parity({});
}

// Every sublayer wrapped in mHC with four streams (docs/mhc.md), through the mhc_native backend;
// the reference composes tests/reference/mhc_reference.py's primitives with the same layers.
// The gates start at 0.5 rather than 0.01 so the mappings are far from uniform and a wrong
// gradient through them would show.
BOOST_AUTO_TEST_CASE(mhc_four_streams) {
  check_parity({"mhc.enabled=true", "mhc.num_residual_streams=4", "mhc.sinkhorn_iterations=7",
                "mhc.init_gating_factor=0.5",
                R"(plugins.load=["sequential_scheduler","transformer","mhc_native"])"});
}

BOOST_AUTO_TEST_CASE(mhc_transposed_two_streams_swiglu) {
  check_parity({"mhc.enabled=true", "mhc.num_residual_streams=2", "mhc.transposed_h_res=true",
                "mhc.init_gating_factor=0.3", "model.activation=\"swiglu\"",
                R"(plugins.load=["sequential_scheduler","transformer","mhc_native"])"});
}

// Two multi-token-prediction depths after the main model (Megatron-LM's MTP): each depth's entry,
// layer, final norm and the shared output layer, the rolled tokens and targets, the depths'
// losses weighted by mtp_loss_scaling_factor / depths in the gradients but not in the reported
// loss. A large factor (0.6) so that the MTP terms carry a good part of every shared gradient.
BOOST_AUTO_TEST_CASE(mtp_two_depths_tied) {
  check_parity({"model.mtp_num_layers=2", "model.mtp_loss_scaling_factor=0.6"});
}
BOOST_AUTO_TEST_CASE(mtp_one_depth_layernorm_swiglu_untied) {
  check_parity({"model.mtp_num_layers=1", "model.normalization=\"LayerNorm\"", "model.activation=\"swiglu\"",
                "model.untie_embeddings_and_output_weights=true"});
}

// Megatron's other position embeddings: none (its hybrid models' default: attention without
// RoPE), and learned absolute positions added to the token embeddings (its GPT default).
BOOST_AUTO_TEST_CASE(no_position_embedding_gqa) {
  check_parity({"model.position_embedding_type=\"none\"", "model.num_query_groups=2"});
}
BOOST_AUTO_TEST_CASE(learned_absolute_positions_layernorm_untied) {
  check_parity({"model.position_embedding_type=\"learned_absolute\"", "model.normalization=\"LayerNorm\"",
                "model.untie_embeddings_and_output_weights=true"});
}

// Bidirectional attention (model.attention.options.attn_mask_type "no_mask", Megatron's
// AttnMaskType.no_mask, as its CLIP ViT): every token sees the whole sequence, in every layer; the
// reference drops its causal mask. GQA and learned absolute positions (no RoPE), as a ViT.
BOOST_AUTO_TEST_CASE(no_mask_attention_gqa_learned_absolute_positions) {
  check_parity({"model.attention.options.attn_mask_type=\"no_mask\"", "model.num_query_groups=2",
                "model.position_embedding_type=\"learned_absolute\""});
}

BOOST_AUTO_TEST_CASE(layernorm_swiglu_gqa_untied) {
  check_parity({"model.normalization=\"LayerNorm\"", "model.activation=\"swiglu\"",
                "model.num_query_groups=2", "model.untie_embeddings_and_output_weights=true"});
}
