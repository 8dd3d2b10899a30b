#include <boost/json.hpp>
#include <stdexcept>
#include <string>

#include "plexus/core/config.hpp"
#include "plexus/core/engine/model.hpp"

namespace plexus {

namespace {

// Megatron-LM's default MLP width (megatron/training/arguments.py): 4 * hidden_size, or with
// SwiGLU, whose first projection is two matrices, two thirds of that, rounded down to a multiple
// of 64: int((4 * h * 2 / 3) / 64) * 64 in Python. In integers the two truncating divisions
// give the same value for every h (8h/3 is never within float rounding of a multiple of 64
// without being one).
int64_t megatron_ffn_hidden_size(int64_t hidden_size, bool swiglu) {
  return swiglu ? (4 * hidden_size * 2 / 3) / 64 * 64 : 4 * hidden_size;
}

}  // namespace

ModelSettings ModelSettings::from_run_config(const boost::json::value& run_config) {
  const boost::json::object& model = run_config.at("model").as_object();
  ModelSettings s;
  const auto get = [&](const char* key) { return model.at(key).to_number<int64_t>(); };
  s.vocab_size = get("vocab_size");
  if (model.contains("make_vocab_size_divisible_by"))
    s.make_vocab_size_divisible_by = get("make_vocab_size_divisible_by");
  s.padded_vocab_size = s.vocab_size;
  if (const auto* sp = model.if_contains("sequence_parallel"); sp != nullptr && sp->is_bool())
    s.sequence_parallel = sp->as_bool();
  s.hidden_size = get("hidden_size");
  s.num_layers = get("num_layers");
  s.num_attention_heads = get("num_attention_heads");
  s.num_query_groups = get("num_query_groups") == 0 ? s.num_attention_heads : get("num_query_groups");
  const bool swiglu = model.at("activation").as_string() == "swiglu";
  s.ffn_hidden_size =
      get("ffn_hidden_size") == 0 ? megatron_ffn_hidden_size(s.hidden_size, swiglu) : get("ffn_hidden_size");
  s.seq_length = get("seq_length");
  s.tied = !model.at("untie_embeddings_and_output_weights").as_bool();
  if (const auto* f = model.if_contains("mtp_loss_scaling_factor"); f != nullptr && f->is_number())
    s.mtp_loss_scaling_factor = f->to_number<double>();
  if (const auto* run = run_config.as_object().if_contains("run"); run != nullptr) {
    if (const auto* precision = run->as_object().if_contains("precision");
        precision != nullptr && precision->as_string() == "bf16")
      s.activation_dtype = plx_dtype_bf16();
  }
  // Checked here so the message names the config keys, before any layer is created.
  if (s.hidden_size % s.num_attention_heads != 0)
    throw config::ConfigError("model.num_attention_heads", "must divide model.hidden_size (" +
                                                               std::to_string(s.hidden_size) + "), got " +
                                                               std::to_string(s.num_attention_heads));
  if (s.ffn_hidden_size == 0)
    throw config::ConfigError(
        "model.ffn_hidden_size",
        "0 derives Megatron's SwiGLU default int(8 * hidden_size / 3 / 64) * 64, which is 0 "
        "for model.hidden_size " +
            std::to_string(s.hidden_size) + " (below 24): set the MLP width");
  if (s.num_attention_heads % s.num_query_groups != 0)
    throw config::ConfigError("model.num_query_groups", "must divide model.num_attention_heads (" +
                                                            std::to_string(s.num_attention_heads) +
                                                            "), got " + std::to_string(s.num_query_groups));
  // Layers see the model section with the derived values filled in, without the component
  // sections (those are each layer's own config).
  for (const auto& [key, value] : model)
    if (!value.is_object()) s.layer_config[key] = value;
  s.mhc = MhcSettings::from_run_config(run_config);
  s.layer_config["num_query_groups"] = s.num_query_groups;
  s.layer_config["ffn_hidden_size"] = s.ffn_hidden_size;
  s.pad_vocabulary(1);
  s.layer_config["sequence_parallel"] = false;  // the model turns it on with its tp group
  return s;
}

// Megatron-LM's vocab_size_with_padding: up to a multiple of make_vocab_size_divisible_by x tp.
void ModelSettings::pad_vocabulary(int64_t tp) {
  const int64_t multiple = make_vocab_size_divisible_by * tp;
  padded_vocab_size = (vocab_size + multiple - 1) / multiple * multiple;
  layer_config["padded_vocab_size"] = padded_vocab_size;
}

MhcSettings MhcSettings::from_run_config(const boost::json::value& run_config) {
  MhcSettings s;
  const boost::json::object* mhc =
      run_config.as_object().if_contains("mhc") != nullptr ? &run_config.at("mhc").as_object() : nullptr;
  if (mhc == nullptr || !mhc->at("enabled").as_bool()) return s;  // the plain residual connection
  s.enabled = true;
  s.streams = mhc->at("num_residual_streams").to_number<int64_t>();
  s.iterations = mhc->at("sinkhorn_iterations").to_number<int32_t>();
  s.eps = mhc->at("eps").to_number<double>();
  s.init_gating = mhc->at("init_gating_factor").to_number<double>();
  s.transposed = mhc->at("transposed_h_res").as_bool();
  s.backend = std::string(mhc->at("backend").as_string());
  s.options = mhc->at("options");
  return s;
}

}  // namespace plexus
