// The combined_1f1b scheduler on the real engine: a GPT with MoE and dense layers, with and
// without mHC, trained 10 AdamW steps of 3 microbatches with the sequential scheduler and with
// combined_1f1b; losses and final weights must be bit-identical. The engine really holds two
// microbatches in flight (activations, layer states, mHC streams) and accumulates gradients.
//
// moe.layer on one rank has no communication stage, and combined_1f1b refuses a model without
// one. So the plugin is driven through a thin C table that passes the engine's env on and
// reports the MoE layer's middle stage ("experts") as a communication stage: only the labels
// change, so the plugin interleaves the two microbatches there exactly as it would around a
// real all-to-all, and every call still goes to the engine. The ep > 1 run with real all-to-alls
// under mpirun is mpi.test_combined_1f1b_ep.
//
// By default combined_1f1b asks the engine for weight gradients apart: those of moe.layer and of
// the dense layers' attention and MLP (transformer.attention, transformer.mlp) come through
// backward_weights, delayed into the slots where the other microbatch waits; they must still be
// bit-identical, and so must a run with "delay_weight_gradients": false. A scheduler that asks for
// the split and never calls backward_weights, or asks too late, gets the engine's error.
#define BOOST_TEST_MODULE combined_1f1b_training
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/engine/model.hpp"
#include "plexus/core/engine/optimizer.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"
#include "plexus/plexus.h"

namespace {

namespace fs = std::filesystem;

const fs::path kPlugins = fs::path(PLEXUS_BUILD_DIR) / "lib/plexus/plugins";

// ---- the relabelling table around the real plugin's ----
const plx_scheduler_v1* g_plugin_table = nullptr;  // combined_1f1b's, set before any use
std::vector<std::pair<char, uint32_t>> g_calls;    // ('F', 'B' or 'W', microbatch), in call order

struct Relabel {
  const plx_schedule_env* engine;
  static const plx_schedule_env& of(void* ctx) { return *static_cast<Relabel*>(ctx)->engine; }

  static plx_status num_stages(void* ctx, uint32_t unit, uint32_t* out) noexcept {
    return of(ctx).unit_num_stages(of(ctx).ctx, unit, out);
  }
  static plx_status stage(void* ctx, uint32_t unit, uint32_t index, plx_stage_info* out) noexcept {
    const plx_status status = of(ctx).unit_stage(of(ctx).ctx, unit, index, out);
    if (status == PLX_OK && out->name != nullptr && std::string_view(out->name) == "experts")
      out->kind = PLX_STAGE_COMM;
    return status;
  }
  static plx_status forward(void* ctx, uint32_t mb, uint32_t unit, uint32_t s, plx_stream stream) noexcept {
    g_calls.emplace_back('F', mb);
    return of(ctx).forward(of(ctx).ctx, mb, unit, s, stream);
  }
  static plx_status backward(void* ctx, uint32_t mb, uint32_t unit, uint32_t s, plx_stream stream) noexcept {
    g_calls.emplace_back('B', mb);
    return of(ctx).backward(of(ctx).ctx, mb, unit, s, stream);
  }
  static plx_status backward_weights(void* ctx, uint32_t mb, uint32_t unit, plx_stream stream) noexcept {
    g_calls.emplace_back('W', mb);
    return of(ctx).backward_weights(of(ctx).ctx, mb, unit, stream);
  }
  static plx_status split_weight_gradients(void* ctx) noexcept {
    return of(ctx).split_weight_gradients(of(ctx).ctx);
  }
};

struct RelabelledScheduler {
  void* plugin_scheduler = nullptr;

  static plx_status create(plx_config config, void** out) noexcept {
    auto self = std::make_unique<RelabelledScheduler>();
    const plx_status status = g_plugin_table->create(config, &self->plugin_scheduler);
    if (status == PLX_OK) *out = self.release();
    return status;
  }
  static void destroy(void* s) noexcept {
    const std::unique_ptr<RelabelledScheduler> self(static_cast<RelabelledScheduler*>(s));
    g_plugin_table->destroy(self->plugin_scheduler);
  }
  static plx_status run_step(void* s, const plx_schedule_env* env) noexcept {
    Relabel relabel{env};
    plx_schedule_env wrapped = *env;
    wrapped.ctx = &relabel;
    wrapped.unit_num_stages = &Relabel::num_stages;
    wrapped.unit_stage = &Relabel::stage;
    wrapped.forward = &Relabel::forward;
    wrapped.backward = &Relabel::backward;
    wrapped.backward_weights = &Relabel::backward_weights;
    wrapped.split_weight_gradients = &Relabel::split_weight_gradients;
    return g_plugin_table->run_step(static_cast<RelabelledScheduler*>(s)->plugin_scheduler, &wrapped);
  }
};

const plx_scheduler_v1 kRelabelledTable = {sizeof(plx_scheduler_v1), 0, &RelabelledScheduler::create,
                                           &RelabelledScheduler::destroy, &RelabelledScheduler::run_step};

// ---- schedulers that break the split's contract ----
// Each microbatch's forward then backward, as the sequential scheduler runs them, after asking for
// split weight gradients (before any backward, or after the first microbatch's), and never
// calling backward_weights.
template <bool kAskLate>
struct SplitWithoutWeights {
  static plx_status create(plx_config, void** out) noexcept {
    static int instance = 0;
    *out = &instance;
    return PLX_OK;
  }
  static void destroy(void*) noexcept {}
  static plx_status run_step(void*, const plx_schedule_env* env) noexcept {
    plx_status status = PLX_OK;
    if (!kAskLate && (status = env->split_weight_gradients(env->ctx)) != PLX_OK) return status;
    for (uint32_t mb = 0; mb < env->num_microbatches; ++mb) {
      for (uint32_t unit = 0; unit < env->num_units; ++unit) {
        uint32_t stages = 0;
        if ((status = env->unit_num_stages(env->ctx, unit, &stages)) != PLX_OK) return status;
        for (uint32_t stage = 0; stage < stages; ++stage)
          if ((status = env->forward(env->ctx, mb, unit, stage, env->compute_stream)) != PLX_OK)
            return status;
      }
      for (uint32_t unit = env->num_units; unit-- > 0;) {
        uint32_t stages = 0;
        if ((status = env->unit_num_stages(env->ctx, unit, &stages)) != PLX_OK) return status;
        for (uint32_t stage = stages; stage-- > 0;)
          if ((status = env->backward(env->ctx, mb, unit, stage, env->compute_stream)) != PLX_OK)
            return status;
      }
      if (kAskLate && mb == 0 && (status = env->split_weight_gradients(env->ctx)) != PLX_OK) return status;
    }
    return PLX_OK;
  }
  static constexpr plx_scheduler_v1 table = {sizeof(plx_scheduler_v1), 0, &create, &destroy, &run_step};
};

// ---- training ----
struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<std::byte>> weights;
};

boost::json::value run_config(bool mhc, int mtp_depths = 0) {
  std::vector<std::string> overrides = {"model.vocab_size=50",
                                        "model.hidden_size=32",
                                        "model.num_layers=3",
                                        "model.num_attention_heads=4",
                                        "model.ffn_hidden_size=40",
                                        "model.seq_length=16",
                                        "model.moe.layer_freq=2",
                                        "model.moe.options.num_moe_experts=4",
                                        "model.moe.options.moe_router_topk=2",
                                        "model.moe.options.moe_ffn_hidden_size=32",
                                        "model.moe.options.moe_aux_loss_coeff=0.01",
                                        "model.moe.options.moe_z_loss_coeff=0.001",
                                        "optimizer.lr=0.01",
                                        "optimizer.lr_warmup_steps=3",
                                        "train.steps=10",
                                        "train.microbatches=3",
                                        "optimizer.clip_grad=0.5",
                                        "model.mtp_num_layers=" + std::to_string(mtp_depths)};
  if (mhc) {
    overrides.push_back(R"(plugins.load=["sequential_scheduler","transformer","moe","mhc_native"])");
    overrides.push_back("mhc.enabled=true");
    overrides.push_back("mhc.backend=mhc_native");
  } else {
    overrides.push_back(R"(plugins.load=["sequential_scheduler","transformer","moe"])");
  }
  return plexus::load_run_config(std::nullopt, overrides);
}

Trained train(plexus::PluginHost& host, const boost::json::value& rc,
              const plexus::SchedulerInstance& scheduler) {
  plexus::Model model(host, rc);
  model.initialize(7);
  const int64_t microbatches = 3, batch = 2, seq = model.settings().seq_length;
  std::mt19937 gen(11);
  std::uniform_int_distribution<int32_t> token(0, 49);
  // The same microbatches every step, so the loss falls: the weights really change.
  std::vector<plexus::Batch> batches;
  for (int64_t mb = 0; mb < microbatches; ++mb) {
    plexus::Batch b{plexus::Tensor({batch, seq}, plx_dtype_i32()),
                    plexus::Tensor({batch, seq}, plx_dtype_i32())};
    for (int64_t i = 0; i < batch * seq; ++i) {
      b.tokens.data<int32_t>()[i] = token(gen);
      b.targets.data<int32_t>()[i] = token(gen);
    }
    batches.push_back(std::move(b));
  }
  plexus::AdamW adam(model.parameters(), plexus::OptimizerSettings::from_run_config(rc));
  Trained out;
  for (int step = 0; step < 10; ++step) {
    model.parameters().zero_grads();
    out.losses.push_back(model.forward_backward(scheduler, batches));
    adam.step(step);
  }
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const plexus::Tensor& v = model.parameters()[i].value;
    const auto* bytes = static_cast<const std::byte*>(v.raw());
    out.weights.emplace_back(bytes, bytes + v.bytes());
  }
  return out;
}

void check_bit_identical(bool mhc, bool delay_weights, int mtp_depths = 0) {
  boost::json::value rc = run_config(mhc, mtp_depths);
  plexus::PluginHost host;
  plexus::load_configured_plugins(host, rc, {{kPlugins}, false});
  plexus::check_components(host, rc);
  host.load(kPlugins / "libplexus_combined_1f1b.so");
  const plexus::Component& plugin = host.get(PLX_KIND_SCHEDULER, "combined_1f1b");
  g_plugin_table = &plugin.as<plx_scheduler_v1>();
  plexus::Component relabelled = plugin;
  relabelled.table = &kRelabelledTable;

  plexus::ConfigHandle options(boost::json::object{{"delay_weight_gradients", delay_weights}},
                               "scheduler.options");
  const plexus::SchedulerInstance sequential(host.get(PLX_KIND_SCHEDULER, "sequential"), nullptr);
  const plexus::SchedulerInstance combined(relabelled, options.get());
  const Trained reference = train(host, rc, sequential);
  g_calls.clear();
  const Trained overlapped = train(host, rc, combined);

  // The engine splits the weight gradients of every layer with backward_weights: the attention
  // and MLP of every decoder layer and moe.layer; the embedding, final norm and head compute
  // theirs in backward.
  for (const char* name : {"transformer.attention", "transformer.mlp", "moe.layer"})
    BOOST_TEST(host.get(PLX_KIND_LAYER, name).as<plx_layer_v1>().backward_weights != nullptr, name);
  for (const char* name : {"transformer.embedding", "transformer.norm", "transformer.lm_head"})
    BOOST_TEST(host.get(PLX_KIND_LAYER, name).as<plx_layer_v1>().backward_weights == nullptr, name);

  // The weight gradients came apart exactly when asked for: one scheduler call per unit and
  // microbatch of every step (6 units: the embedding, 3 decoder layers, the final norm, the head;
  // a decoder unit's call runs its attention's and its MLP's or MoE layer's backward_weights;
  // and one per MTP depth, whose unit holds its layers).
  const auto weight_calls =
      std::count_if(g_calls.begin(), g_calls.end(), [](const auto& c) { return c.first == 'W'; });
  BOOST_TEST(weight_calls == (delay_weights ? 10 * 3 * (6 + mtp_depths) : 0));

  // The schedule really interleaved: microbatch 1's forward ran between microbatch 0's
  // backward calls in every step.
  std::size_t interleavings = 0;
  for (std::size_t k = 1; k + 1 < g_calls.size(); ++k)
    if (g_calls[k] == std::pair<char, uint32_t>{'F', 1} &&
        g_calls[k - 1] == std::pair<char, uint32_t>{'B', 0})
      ++interleavings;
  BOOST_TEST(interleavings >= 10u,
             "forward(1) ran between backward(0) stages in " << interleavings << " places");

  BOOST_TEST_REQUIRE(overlapped.losses.size() == reference.losses.size());
  for (std::size_t s = 0; s < reference.losses.size(); ++s) {
    BOOST_TEST_MESSAGE("step " << s << ": loss " << reference.losses[s] << " (sequential), "
                               << overlapped.losses[s] << " (combined_1f1b)");
    BOOST_TEST(std::memcmp(&overlapped.losses[s], &reference.losses[s], sizeof(double)) == 0,
               "loss of step " << s);
  }
  BOOST_TEST(reference.losses.back() < reference.losses.front());  // it trained
  BOOST_TEST_REQUIRE(overlapped.weights.size() == reference.weights.size());
  for (std::size_t i = 0; i < reference.weights.size(); ++i)
    BOOST_TEST((overlapped.weights[i] == reference.weights[i]), "parameter " << i << " bit-identical");
}

}  // namespace

BOOST_AUTO_TEST_CASE(combined_1f1b_matches_sequential_bit_for_bit_with_moe_and_dense_layers) {
  check_bit_identical(false, true);
}

// Two multi-token-prediction depths (Megatron allows the overlap with at most one): each unit holds
// the rolled tokens' embedding, the entry, a copy of the last decoder layer (an MoE layer, whose
// "experts" stage the schedule overlaps too), the depth's norm and the shared head.
BOOST_AUTO_TEST_CASE(combined_1f1b_matches_sequential_bit_for_bit_with_two_mtp_depths) {
  check_bit_identical(false, true, 2);
}

BOOST_AUTO_TEST_CASE(combined_1f1b_matches_sequential_bit_for_bit_under_mhc) {
  check_bit_identical(true, true);
}

BOOST_AUTO_TEST_CASE(combined_1f1b_without_delayed_weight_gradients_matches_sequential_bit_for_bit) {
  check_bit_identical(false, false);
}

// A scheduler that asks for split weight gradients and returns without calling backward_weights
// fails the step naming the unit and microbatch; asking after a backward call is refused.
BOOST_AUTO_TEST_CASE(a_split_without_backward_weights_and_a_late_split_are_errors) {
  boost::json::value rc = run_config(false);
  plexus::PluginHost host;
  plexus::load_configured_plugins(host, rc, {{kPlugins}, false});
  plexus::check_components(host, rc);
  plexus::Component forgetful = host.get(PLX_KIND_SCHEDULER, "sequential");
  forgetful.table = &SplitWithoutWeights<false>::table;
  plexus::Component late = forgetful;
  late.table = &SplitWithoutWeights<true>::table;
  const auto error_of = [&](const plexus::Component& component) -> std::string {
    const plexus::SchedulerInstance scheduler(component, nullptr);
    try {
      train(host, rc, scheduler);
    } catch (const std::exception& e) {
      BOOST_TEST_MESSAGE("refused as expected: " << e.what());
      return e.what();
    }
    BOOST_ERROR("the step succeeded");
    return {};
  };
  const std::string missing = error_of(forgetful);
  BOOST_TEST(missing.find("without calling backward_weights for microbatch 0 of unit") != std::string::npos,
             missing);
  // The first unit whose weight gradients are due: the first decoder layer's attention, which
  // splits like moe.layer.
  BOOST_TEST(missing.find("decoder.layers.0 attention (transformer.attention)") != std::string::npos,
             missing);
  const std::string too_late = error_of(late);
  BOOST_TEST(
      too_late.find("split_weight_gradients: the scheduler must ask before the step's first backward") !=
          std::string::npos,
      too_late);
}
