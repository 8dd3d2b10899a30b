#include "hf_import.hpp"

#include <boost/json.hpp>

#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "hf_names.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus::cli {
namespace {

namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;

[[noreturn]] void cannot(const std::string& what) {
  throw std::runtime_error("plexus checkpoint import --format hf: " + what);
}

boost::json::object read_object(const fs::path& file) {
  std::ifstream in(file);
  if (!in) cannot("cannot read " + file.string());
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text.str(), ec);
  if (ec || !v.is_object()) cannot(file.string() + " is not a JSON object");
  return std::move(v.as_object());
}

float half_to_float(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  const float sign = (h & 0x8000) != 0 ? -1.0f : 1.0f;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa == 0 ? sign * INFINITY : NAN;
  return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
}

// The model's tensors over its safetensors file or shards, read as float32; every tensor taken
// is remembered, so that what is left can be named.
class HfTensors {
 public:
  explicit HfTensors(const fs::path& dir) {
    std::error_code ec;
    if (fs::is_regular_file(dir / "model.safetensors", ec)) {
      files_.push_back(ck::SafetensorsFile::open(dir / "model.safetensors"));
      for (const std::string& name : files_.back().names()) where_[name] = 0;
      return;
    }
    const fs::path index = dir / "model.safetensors.index.json";
    if (!fs::is_regular_file(index, ec))
      cannot(dir.string() +
             " has neither model.safetensors nor model.safetensors.index.json (a .bin "
             "checkpoint: save it again with save_pretrained(safe_serialization=True))");
    const boost::json::object map = read_object(index);
    if (!map.contains("weight_map") || !map.at("weight_map").is_object())
      cannot(index.string() + " has no \"weight_map\"");
    std::map<std::string, std::size_t> file_index;
    for (const auto& [name, file] : map.at("weight_map").as_object()) {
      if (!file.is_string())
        cannot(index.string() + ": the file of " + std::string(name) + " is not a string");
      const std::string shard(file.as_string());
      auto [at, added] = file_index.emplace(shard, files_.size());
      if (added) files_.push_back(ck::SafetensorsFile::open(dir / shard));
      where_[std::string(name)] = at->second;
    }
  }

  std::vector<float> take(const std::string& name, const std::vector<int64_t>& shape) {
    const auto at = where_.find(name);
    if (at == where_.end()) cannot("the model has no tensor " + name);
    const ck::TensorView t = files_[at->second].tensor(name);
    if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
      cannot(name + " has another shape than config.json describes");
    taken_.insert(name);
    std::size_t n = 1;
    for (int64_t d : shape) n *= static_cast<std::size_t>(d);
    std::vector<float> out(n);
    if (t.dtype == ck::DType::f32) {
      std::memcpy(out.data(), t.bytes.data(), n * sizeof(float));
    } else if (t.dtype == ck::DType::bf16 || t.dtype == ck::DType::f16) {
      for (std::size_t i = 0; i < n; ++i) {
        uint16_t h = 0;
        std::memcpy(&h, t.bytes.data() + 2 * i, 2);
        if (t.dtype == ck::DType::bf16) {
          const uint32_t bits = uint32_t{h} << 16;
          std::memcpy(&out[i], &bits, 4);
        } else {
          out[i] = half_to_float(h);
        }
      }
    } else {
      cannot(name + " is neither float32, bfloat16 nor float16");
    }
    return out;
  }
  bool contains(const std::string& name) const { return where_.contains(name); }
  // Names not taken, but the rotary tables older checkpoints stored (recomputed here).
  std::vector<std::string> left() const {
    std::vector<std::string> out;
    for (const auto& [name, file] : where_)
      if (!taken_.contains(name) && !name.ends_with("rotary_emb.inv_freq")) out.push_back(name);
    return out;
  }

 private:
  std::deque<ck::SafetensorsFile> files_;
  std::map<std::string, std::size_t> where_;
  std::set<std::string> taken_;
};

int64_t int_of(const boost::json::object& c, const char* key,
               std::optional<int64_t> otherwise = std::nullopt) {
  const boost::json::value* v = c.if_contains(key);
  if (v == nullptr || v->is_null()) {
    if (otherwise) return *otherwise;
    cannot("config.json has no \"" + std::string(key) + "\"");
  }
  if (!v->is_int64() || v->as_int64() <= 0)
    cannot("config.json: \"" + std::string(key) + "\" is not a positive integer");
  return v->as_int64();
}

double number_of(const boost::json::object& c, const char* key, double otherwise) {
  const boost::json::value* v = c.if_contains(key);
  if (v == nullptr || v->is_null()) return otherwise;
  if (!v->is_number()) cannot("config.json: \"" + std::string(key) + "\" is not a number");
  return v->to_number<double>();
}

bool flag_of(const boost::json::object& c, const char* key, bool otherwise) {
  const boost::json::value* v = c.if_contains(key);
  return v != nullptr && v->is_bool() ? v->as_bool() : otherwise;
}

// What config.json says of the model, checked against what Plexus's GPT is.
struct HfModel {
  bool moe = false;  // Mixtral: every MLP an MoE layer
  int64_t V = 0, C = 0, F = 0, L = 0, nh = 0, ng = 0, experts = 0, topk = 0;
  bool tied = false;
  std::vector<std::string> settings;  // the run's model keys: "model.hidden_size=1024", ...
};

HfModel read_model(const boost::json::object& c, int64_t seq_length) {
  const std::string type = c.contains("model_type") && c.at("model_type").is_string()
                               ? std::string(c.at("model_type").as_string())
                               : "";
  if (type != "llama" && type != "mixtral")
    cannot("config.json's model_type is \"" + type +
           "\": transformers' Llama and Mixtral import (a GPT with RMSNorm, SwiGLU and RoPE, and its MoE)");
  if (c.contains("sliding_window") && !c.at("sliding_window").is_null())
    cannot("config.json has a sliding_window: Plexus's attention is full causal attention");
  const std::string act = c.contains("hidden_act") && c.at("hidden_act").is_string()
                              ? std::string(c.at("hidden_act").as_string())
                              : "silu";
  if (act != "silu") cannot("config.json's hidden_act is \"" + act + "\": Plexus's SwiGLU is silu");
  if (c.contains("rope_scaling") && !c.at("rope_scaling").is_null())
    cannot("config.json has rope_scaling: Plexus's rotary embeddings are unscaled");
  if (flag_of(c, "attention_bias", false) || flag_of(c, "mlp_bias", false))
    cannot("config.json has attention_bias or mlp_bias: Plexus's linear layers have no biases");
  HfModel m;
  m.moe = type == "mixtral";
  m.V = int_of(c, "vocab_size");
  m.C = int_of(c, "hidden_size");
  m.F = int_of(c, "intermediate_size");
  m.L = int_of(c, "num_hidden_layers");
  m.nh = int_of(c, "num_attention_heads");
  m.ng = int_of(c, "num_key_value_heads", m.nh);
  if (m.C % m.nh != 0 || m.nh % m.ng != 0)
    cannot("config.json: heads that do not divide hidden_size or each other");
  if (int_of(c, "head_dim", m.C / m.nh) != m.C / m.nh)
    cannot("config.json's head_dim is not hidden_size / num_attention_heads");
  m.tied = flag_of(c, "tie_word_embeddings", false);  // LlamaConfig's default
  const int64_t seq = seq_length > 0 ? seq_length : int_of(c, "max_position_embeddings");
  const auto number = [](double v) { return boost::json::serialize(boost::json::value(v)); };
  m.settings = {"model.vocab_size=" + std::to_string(m.V),
                "model.hidden_size=" + std::to_string(m.C),
                "model.num_layers=" + std::to_string(m.L),
                "model.num_attention_heads=" + std::to_string(m.nh),
                "model.num_query_groups=" + std::to_string(m.ng),
                "model.ffn_hidden_size=" + std::to_string(m.F),
                "model.seq_length=" + std::to_string(seq),
                "model.activation=\"swiglu\"",
                "model.normalization=\"RMSNorm\"",
                "model.layernorm_epsilon=" + number(number_of(c, "rms_norm_eps", 1e-6)),
                "model.rotary_base=" + number(number_of(c, "rope_theta", 10000)),
                "model.init_method_std=" + number(number_of(c, "initializer_range", 0.02)),
                std::string("model.untie_embeddings_and_output_weights=") + (m.tied ? "false" : "true")};
  if (m.moe) {  // every layer's MLP an MoE layer, routed as Mixtral routes (Megatron's defaults)
    m.experts = int_of(c, "num_local_experts");
    m.topk = int_of(c, "num_experts_per_tok");
    m.settings.push_back("model.moe.layer_freq=1");
    m.settings.push_back(R"(model.moe.options={"num_moe_experts": )" + std::to_string(m.experts) +
                         R"(, "moe_router_topk": )" + std::to_string(m.topk) +
                         R"(, "moe_ffn_hidden_size": )" + std::to_string(m.F) + "}");
  }
  return m;
}

}  // namespace

HfImportResult import_hf(const fs::path& hf_dir, const fs::path& out, int64_t seq_length) {
  std::error_code ec;
  if (fs::exists(out, ec)) cannot(out.string() + " exists (the import writes a new checkpoint directory)");
  const HfModel cfg = read_model(read_object(hf_dir / "config.json"), seq_length);
  const boost::json::value run_config = load_run_config(std::nullopt, cfg.settings);
  const int64_t V = cfg.V, C = cfg.C, F = cfg.F, L = cfg.L, nh = cfg.nh, ng = cfg.ng, E = cfg.experts;
  const int64_t hd = C / nh, per = nh / ng;
  const bool moe = cfg.moe, tied = cfg.tied;
  HfImportResult result;
  result.model_settings = cfg.settings;

  HfTensors hf(hf_dir);
  std::deque<std::vector<float>> owned;
  std::vector<ck::TensorData> model;
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    const std::vector<float>& kept = owned.emplace_back(std::move(values));
    model.push_back({name, ck::DType::f32, std::move(shape), std::as_bytes(std::span<const float>(kept))});
  };
  namespace n = hf_names;
  add(n::kEmbedding.plexus, {V, C}, hf.take(n::kEmbedding.hf, {V, C}));
  // transformers' gate, up and down as Plexus's [gate; up] and down.
  const auto mlp = [&](const n::Layer::Mlp& names) {
    std::vector<float> fc1 = hf.take(names.gate, {F, C});
    const std::vector<float> up = hf.take(names.up, {F, C});
    fc1.insert(fc1.end(), up.begin(), up.end());
    add(names.fc1, {2 * F, C}, std::move(fc1));
    add(names.fc2, {C, F}, hf.take(names.down, {C, F}));
  };
  for (int64_t i = 0; i < L; ++i) {
    const n::Layer layer(i);
    add(layer.input_norm().plexus, {C}, hf.take(layer.input_norm().hf, {C}));
    const std::vector<float> q = hf.take(layer.q(), {nh * hd, C});
    const std::vector<float> k = hf.take(layer.k(), {ng * hd, C});
    const std::vector<float> v = hf.take(layer.v(), {ng * hd, C});
    // Megatron's fused rows, group by group: [the group's query heads; its key; its value].
    std::vector<float> qkv;
    const auto rows = [&](const std::vector<float>& from, int64_t first, int64_t count) {
      qkv.insert(qkv.end(), from.begin() + first * C, from.begin() + (first + count) * C);
    };
    for (int64_t g = 0; g < ng; ++g) {
      rows(q, g * per * hd, per * hd);
      rows(k, g * hd, hd);
      rows(v, g * hd, hd);
    }
    add(layer.qkv(), {(nh + 2 * ng) * hd, C}, std::move(qkv));
    add(layer.attention_out().plexus, {C, nh * hd}, hf.take(layer.attention_out().hf, {C, nh * hd}));
    add(layer.mlp_norm().plexus, {C}, hf.take(layer.mlp_norm().hf, {C}));
    if (!moe) {
      mlp(layer.dense());
      continue;
    }
    add(layer.router().plexus, {E, C}, hf.take(layer.router().hf, {E, C}));
    for (int64_t e = 0; e < E; ++e) mlp(layer.expert(e));
  }
  add(n::kFinalNorm.plexus, {C}, hf.take(n::kFinalNorm.hf, {C}));
  if (!tied)
    add(n::kOutput.plexus, {V, C}, hf.take(n::kOutput.hf, {V, C}));
  else if (hf.contains(n::kOutput.hf))
    static_cast<void>(hf.take(n::kOutput.hf, {V, C}));  // the embedding's copy
  if (const std::vector<std::string> other = hf.left(); !other.empty())
    cannot("tensor " + other.front() + " (and " + std::to_string(other.size() - 1) +
           " more) has no place in Plexus's GPT");

  // A fresh optimizer: both Adam moments zero.
  std::size_t largest = 0;
  for (const ck::TensorData& t : model) largest = std::max(largest, t.bytes.size());
  const std::vector<std::byte> zeros(largest);
  std::vector<ck::TensorData> moments;
  for (const ck::TensorData& t : model)
    for (const char* suffix : {".exp_avg", ".exp_avg_sq"})
      moments.push_back({t.name + suffix, ck::DType::f32, t.shape, std::span(zeros).first(t.bytes.size())});
  const boost::json::object state{
      {"format", "plexus-checkpoint-1"}, {"step", 0}, {"data_position", 0}, {"config", run_config}};
  ck::create_checkpoint(out, 0, model, moments, state);
  result.tensors = static_cast<int64_t>(model.size());
  return result;
}

}  // namespace plexus::cli
