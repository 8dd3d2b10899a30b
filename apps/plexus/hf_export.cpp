#include "hf_export.hpp"

#include <boost/json.hpp>

#include <unistd.h>

#include <cstring>
#include <deque>
#include <fstream>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>

#include "hf_names.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/engine/model.hpp"

namespace plexus::cli {
namespace {

namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;
using Bytes = std::span<const std::byte>;

[[noreturn]] void cannot(const std::string& what) {
  throw std::runtime_error("plexus checkpoint export --format hf: " + what);
}

std::string text_or(const boost::json::object& section, const char* key, const std::string& otherwise) {
  const boost::json::value* v = section.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : otherwise;
}

double number_or(const boost::json::object& section, const char* key, double otherwise) {
  const boost::json::value* v = section.if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<double>() : otherwise;
}

// The checkpoint's tensors by name, both of Megatron's spellings of a pre-norm accepted; every
// tensor taken is remembered, so that what is left can be named.
class Tensors {
 public:
  explicit Tensors(const ck::SafetensorsFile& file) : file_(file) {}

  // The float32 tensor `name` (or its Transformer Engine spelling `te`) of `shape`.
  ck::TensorView take(const std::string& name, const std::vector<int64_t>& shape,
                      const std::string& te = "") {
    const std::string found = file_.contains(name) ? name : (!te.empty() && file_.contains(te) ? te : "");
    if (found.empty())
      cannot("model.safetensors has no tensor " + name + (te.empty() ? "" : " (nor " + te + ")"));
    const ck::TensorView t = file_.tensor(found);
    if (t.dtype != ck::DType::f32) cannot(found + " is not float32");
    if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
      cannot(found + " has another shape than the config's model describes");
    taken_.insert(found);
    return t;
  }
  // The names not taken, but those of the multi-token-prediction depths (left out).
  std::vector<std::string> left(std::vector<std::string>& mtp) const {
    std::vector<std::string> out;
    for (const std::string& name : file_.names()) {
      if (taken_.contains(name)) continue;
      (name.starts_with("mtp.") ? mtp : out).push_back(name);
    }
    return out;
  }

 private:
  const ck::SafetensorsFile& file_;
  std::set<std::string> taken_;
};

// What of the model neither Llama nor Mixtral holds, refused before anything is read.
void expect_representable(const boost::json::object& run_config) {
  const boost::json::object& model = run_config.at("model").as_object();
  const std::string norm = text_or(model, "normalization", "RMSNorm");
  if (norm != "RMSNorm")
    cannot("model.normalization is \"" + norm + "\": transformers' LlamaForCausalLM has RMSNorm");
  const std::string act = text_or(model, "activation", "gelu");
  if (act != "swiglu")
    cannot("model.activation is \"" + act + "\": transformers' LlamaForCausalLM has SwiGLU MLPs");
  const std::string pos = text_or(model, "position_embedding_type", "rope");
  if (pos != "rope")
    cannot("model.position_embedding_type is \"" + pos +
           "\": transformers' LlamaForCausalLM has rotary embeddings");
  if (const boost::json::value* mhc = run_config.if_contains("mhc");
      mhc != nullptr && mhc->is_object() && mhc->as_object().contains("enabled") &&
      mhc->as_object().at("enabled").is_bool() && mhc->as_object().at("enabled").as_bool())
    cannot("mhc.enabled: hyper-connections have no transformers architecture");
}

// An MoE layer's options (model.moe.options, Megatron's names), as transformers' Mixtral routes:
// softmax over the experts, the top k renormalized (the same as a softmax over the k chosen
// logits, Megatron's default), every token to its k experts.
struct MoeShape {
  int64_t experts = 8, topk = 2, ffn = 0;
};

MoeShape mixtral_moe(const boost::json::object& model, int64_t model_ffn) {
  boost::json::object options;
  if (const boost::json::value* moe = model.if_contains("moe"); moe != nullptr && moe->is_object())
    if (const boost::json::value* o = moe->as_object().if_contains("options"); o != nullptr && o->is_object())
      options = o->as_object();
  const auto integer = [&](const char* key, int64_t otherwise) {
    const boost::json::value* v = options.if_contains(key);
    return v != nullptr && v->is_int64() ? v->as_int64() : otherwise;
  };
  const auto set = [&](const char* key) {
    const boost::json::value* v = options.if_contains(key);
    return v != nullptr && !v->is_null() && !(v->is_bool() && !v->as_bool()) &&
           !(v->is_number() && v->to_number<double>() == 0);
  };
  MoeShape s;
  s.experts = integer("num_moe_experts", 8);
  s.topk = integer("moe_router_topk", 2);
  s.ffn = integer("moe_ffn_hidden_size", 0);
  if (s.ffn == 0) s.ffn = model_ffn;
  if (text_or(options, "moe_router_score_function", "softmax") != "softmax")
    cannot("model.moe.options.moe_router_score_function is not \"softmax\": Mixtral's router is a softmax");
  for (const char* key :
       {"moe_router_pre_softmax", "moe_expert_capacity_factor", "moe_shared_expert_intermediate_size",
        "moe_router_num_groups", "moe_router_enable_expert_bias", "moe_router_topk_scaling_factor"})
    if (set(key))
      cannot("model.moe.options." + std::string(key) +
             " is set: transformers' MixtralForCausalLM has no such routing");
  return s;
}

// config.json of the LlamaForCausalLM (or MixtralForCausalLM) the model is.
boost::json::object hf_config(const ModelSettings& m, const boost::json::object& model,
                              const std::optional<MoeShape>& moe) {
  boost::json::object hf{
      {"architectures", boost::json::array{moe ? "MixtralForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", moe ? "mixtral" : "llama"},
      {"vocab_size", m.vocab_size},
      {"hidden_size", m.hidden_size},
      {"intermediate_size", moe ? moe->ffn : m.ffn_hidden_size},
      {"num_hidden_layers", m.num_layers},
      {"num_attention_heads", m.num_attention_heads},
      {"num_key_value_heads", m.num_query_groups},
      {"head_dim", m.hidden_size / m.num_attention_heads},
      {"hidden_act", "silu"},
      {"max_position_embeddings", m.seq_length},
      {"rms_norm_eps", number_or(model, "layernorm_epsilon", 1e-5)},
      {"rope_theta", number_or(model, "rotary_base", 10000)},
      {"initializer_range", number_or(model, "init_method_std", 0.02)},
      {"tie_word_embeddings", m.tied},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"torch_dtype", "float32"}};
  if (moe) {
    hf["num_local_experts"] = moe->experts;
    hf["num_experts_per_tok"] = moe->topk;
    hf["sliding_window"] = nullptr;
  }
  return hf;
}

// The model directory, written beside `out` and renamed to it when complete, so that a failure
// (a full disk) leaves no half-written model where a loader would find it.
void write_directory(const fs::path& out, const ck::SafetensorsWriter& weights,
                     const boost::json::object& config, const fs::path& tokenizer) {
  std::error_code ec;
  const fs::path partial =
      out.parent_path() / ("." + out.filename().string() + ".partial-" + std::to_string(getpid()));
  try {
    fs::create_directories(partial);
    weights.write(partial / "model.safetensors");
    std::ofstream config_file(partial / "config.json");
    config_file << boost::json::serialize(config) << "\n";
    if (!config_file.flush()) cannot("cannot write " + (partial / "config.json").string());
    if (!tokenizer.empty()) {
      fs::copy_file(tokenizer, partial / "tokenizer.json");
      std::ofstream(partial / "tokenizer_config.json") << R"({"tokenizer_class": "PreTrainedTokenizerFast"})"
                                                       << "\n";
    }
    fs::rename(partial, out);
  } catch (...) {
    fs::remove_all(partial, ec);
    throw;
  }
}

}  // namespace

HfExportResult export_hf(const fs::path& checkpoint, const fs::path& out) {
  std::error_code ec;
  if (fs::exists(out, ec)) cannot(out.string() + " exists (the export writes a new directory)");
  const ck::LoadedCheckpoint loaded = ck::load_checkpoint(checkpoint);
  const boost::json::value* config =
      loaded.state.is_object() ? loaded.state.as_object().if_contains("config") : nullptr;
  if (config == nullptr || !config->is_object() || !config->as_object().contains("model"))
    cannot((checkpoint / "state.json").string() + " has no run config (\"config.model\")");
  expect_representable(config->as_object());
  const ModelSettings m = ModelSettings::from_run_config(*config);
  const boost::json::object& model = config->as_object().at("model").as_object();
  const int64_t C = m.hidden_size, L = m.num_layers, nh = m.num_attention_heads, ng = m.num_query_groups;
  const int64_t hd = C / nh, per = nh / ng, F = m.ffn_hidden_size, V = m.vocab_size;

  Tensors tensors(loaded.model);
  ck::SafetensorsWriter writer;
  writer.set_metadata("format", "pt");  // transformers' loader asks for it
  std::deque<std::vector<std::byte>> owned;
  // Rows [first, first + count) of a row-major [rows, cols] float32 tensor.
  const auto rows = [](const ck::TensorView& t, int64_t first, int64_t count, int64_t cols) {
    const auto bytes_per_row = static_cast<std::size_t>(cols) * sizeof(float);
    return t.bytes.subspan(static_cast<std::size_t>(first) * bytes_per_row,
                           static_cast<std::size_t>(count) * bytes_per_row);
  };
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, Bytes bytes) {
    writer.add(name, ck::DType::f32, std::move(shape), bytes);
  };

  // Every layer's MLP dense (Llama) or every one an MoE (Mixtral): transformers has no mix of them.
  int64_t moe_layers = 0;
  for (int64_t i = 0; i < L; ++i)
    moe_layers += loaded.model.contains(hf_names::Layer(i).router().plexus) ? 1 : 0;
  if (moe_layers != 0 && moe_layers != L)
    cannot(std::to_string(moe_layers) + " of the " + std::to_string(L) +
           " layers are MoE layers (model.moe.layer_freq): transformers' Llama has none, its Mixtral only "
           "those");
  std::optional<MoeShape> moe;
  if (moe_layers == L) moe = mixtral_moe(model, F);
  namespace n = hf_names;
  const ck::TensorView embed = tensors.take(n::kEmbedding.plexus, {m.padded_vocab_size, C});
  add(n::kEmbedding.hf, {V, C}, rows(embed, 0, V, C));  // without the padded rows
  // An MLP's [gate; up] and down projections as transformers' three.
  const auto mlp = [&](const n::Layer::Mlp& names, int64_t width) {
    const ck::TensorView fc1 = tensors.take(names.fc1, {2 * width, C}, names.te_fc1);
    add(names.gate, {width, C}, rows(fc1, 0, width, C));
    add(names.up, {width, C}, rows(fc1, width, width, C));
    add(names.down, {C, width}, tensors.take(names.fc2, {C, width}, names.te_fc2).bytes);
  };
  for (int64_t i = 0; i < L; ++i) {
    const n::Layer layer(i);
    add(layer.input_norm().hf, {C},
        tensors.take(layer.input_norm().plexus, {C}, layer.te_input_norm()).bytes);
    // Megatron's qkv rows, group by group: [the group's `per` query heads; its key; its value].
    const ck::TensorView qkv = tensors.take(layer.qkv(), {(nh + 2 * ng) * hd, C});
    std::vector<std::byte>&q = owned.emplace_back(), &k = owned.emplace_back(), &v = owned.emplace_back();
    for (int64_t g = 0; g < ng; ++g) {
      const int64_t base = g * (per + 2) * hd;
      const Bytes qs = rows(qkv, base, per * hd, C), ks = rows(qkv, base + per * hd, hd, C),
                  vs = rows(qkv, base + (per + 1) * hd, hd, C);
      q.insert(q.end(), qs.begin(), qs.end());
      k.insert(k.end(), ks.begin(), ks.end());
      v.insert(v.end(), vs.begin(), vs.end());
    }
    add(layer.q(), {nh * hd, C}, q);
    add(layer.k(), {ng * hd, C}, k);
    add(layer.v(), {ng * hd, C}, v);
    add(layer.attention_out().hf, {C, nh * hd},
        tensors.take(layer.attention_out().plexus, {C, nh * hd}).bytes);
    add(layer.mlp_norm().hf, {C}, tensors.take(layer.mlp_norm().plexus, {C}, layer.te_mlp_norm()).bytes);
    if (!moe) {
      mlp(layer.dense(), F);
      continue;
    }
    add(layer.router().hf, {moe->experts, C}, tensors.take(layer.router().plexus, {moe->experts, C}).bytes);
    for (int64_t e = 0; e < moe->experts; ++e) mlp(layer.expert(e), moe->ffn);
  }
  add(n::kFinalNorm.hf, {C}, tensors.take(n::kFinalNorm.plexus, {C}).bytes);
  if (!m.tied)
    add(n::kOutput.hf, {V, C}, rows(tensors.take(n::kOutput.plexus, {m.padded_vocab_size, C}), 0, V, C));
  HfExportResult result;
  std::vector<std::string> mtp;
  if (const std::vector<std::string> other = tensors.left(mtp); !other.empty())
    cannot("tensor " + other.front() + " (and " + std::to_string(other.size() - 1) +
           " more) has no place in transformers' LlamaForCausalLM or MixtralForCausalLM: a GPT of attention "
           "and SwiGLU MLP or MoE layers exports (no Mamba or other layers)");
  if (!mtp.empty())
    result.dropped.push_back(std::to_string(mtp.size()) + " tensors of the multi-token-prediction depths");

  const boost::json::object hf = hf_config(m, model, moe);
  fs::path tokenizer;
  if (const boost::json::value* data = config->as_object().if_contains("data");
      data != nullptr && data->is_object())
    tokenizer = text_or(data->as_object(), "tokenizer", "");
  if (!tokenizer.empty() && !fs::is_regular_file(tokenizer, ec))
    cannot("the run's data.tokenizer " + tokenizer.string() + " is not there to copy");

  write_directory(out, writer, hf, tokenizer);
  result.tokenizer = !tokenizer.empty();
  result.step = loaded.step;
  result.architecture = moe ? "MixtralForCausalLM" : "LlamaForCausalLM";
  result.tensors = static_cast<int64_t>(writer.tensor_count());
  return result;
}

}  // namespace plexus::cli
