// Assembling a rank's model from the stack's plan: its chunks' units, their parameters and the
// connection's, and the parameter residency (whole, or a data-parallel strategy's FSDP units).
#include <boost/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

#include "engine/model_internal.hpp"
#include "engine/pipeline_link.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/engine/random.hpp"

namespace plexus {

struct Model::UnitSource {
  UnitRole role = UnitRole::decoder;
  std::string component;
  boost::json::value options;  // validated against the component's schema
  std::string options_path;    // for messages: "model.attention.options"
  std::string prefix;          // prepended to its parameters' names: "decoder.layers.3."
  std::string label;           // "decoder.layers.3 attention"; the unit's label adds the component
  // Decoder layers are numbered by their logical layer (a GPT layer's attention and MLP share
  // one, for depth-scaled init); the others by their position in the stack.
  uint32_t layer_index = 0;
  const DecoderLayerPlan* layer = nullptr;  // a decoder layer's plan
  uint32_t mtp_depth = 0;                   // the MTP depth it belongs to (0: the main model)

  // The component of the model section's `name` ("embedding", "final_norm", "head", ...) in role
  // `role`, numbered `index`, its parameters under `prefix`.
  static UnitSource of_section(const boost::json::value& model_section, const char* name, UnitRole role,
                               uint32_t index, std::string prefix, std::string label,
                               uint32_t mtp_depth = 0) {
    UnitSource source;
    source.role = role;
    source.component = std::string(model_section.at(name).at("component").as_string());
    source.options = model_section.at(name).at("options");
    source.options_path = std::string("model.") + name + ".options";
    source.prefix = std::move(prefix);
    source.label = std::move(label);
    source.layer_index = index;
    source.mtp_depth = mtp_depth;
    return source;
  }

  // A decoder layer of the plan (the main decoder's or an MTP depth's), numbered `index`.
  static UnitSource of_layer(const DecoderLayerPlan& layer, uint32_t index) {
    UnitSource source;
    source.component = layer.component;
    source.options = layer.options;
    source.options_path = layer.options_path;
    source.prefix = layer.checkpoint_prefix;
    source.label = layer.label;
    source.layer_index = index;
    source.layer = &layer;
    source.mtp_depth = layer.mtp_depth;
    return source;
  }
};

namespace {

DLDevice device_of(const boost::json::value& run_config) {
  const auto* run = run_config.as_object().if_contains("run");
  if (run == nullptr || !run->as_object().contains("device")) return DLDevice{kDLCPU, 0};
  const std::string text(run->at("device").as_string());
  try {
    const DLDevice device = device::parse(text);
    device::require(device);
    return device;
  } catch (const std::exception& e) {
    throw config::ConfigError("run.device", e.what());
  }
}

// A chunk's decoder layers must be logical layers of the plan, the chunks in forward order
// without overlap, the embedding only before layer 0 and the output layers only after the last.
void check_placement(const ModelPlacement& placement, const DecoderPlan& plan) {
  uint32_t next = 0;
  for (std::size_t c = 0; c < placement.chunks.size(); ++c) {
    const ChunkSpec& chunk = placement.chunks[c];
    const std::string where = "model placement, chunk " + std::to_string(c) + " (decoder layers [" +
                              std::to_string(chunk.first_layer) + ", " + std::to_string(chunk.end_layer) +
                              "))";
    if (chunk.first_layer > chunk.end_layer || chunk.end_layer > plan.num_logical)
      throw std::invalid_argument(where + ": not a range of the decoder's " +
                                  std::to_string(plan.num_logical) + " logical layers");
    if (chunk.first_layer < next)
      throw std::invalid_argument(where + ": overlaps the chunk before it or comes before it");
    if (chunk.embedding && chunk.first_layer != 0)
      throw std::invalid_argument(where + ": the embedding comes only before decoder layer 0");
    if (chunk.output_layers && chunk.end_layer != plan.num_logical)
      throw std::invalid_argument(where + ": the final norm and head come only after the last decoder layer");
    if (!chunk.embedding && !chunk.output_layers && chunk.first_layer == chunk.end_layer)
      throw std::invalid_argument(where + ": holds nothing");
    next = chunk.end_layer;
  }
}

}  // namespace

ModelPlacement ModelPlacement::whole(const DecoderPlan& plan) {
  return ModelPlacement{{ChunkSpec{0, plan.num_logical, true, true}}};
}

Model::Model(const PluginHost& host, const boost::json::value& run_config, ModelOptions options)
    : settings_(ModelSettings::from_run_config(run_config)), host_(&host), device_(device_of(run_config)) {
  params_.set_deferred(options.deferred_parameters);
  if (plx_dtype_equal(settings_.activation_dtype, plx_dtype_bf16()) && device_.device_type != kDLCUDA)
    throw config::ConfigError("run.precision",
                              "\"bf16\" needs a CUDA device (run.device = \"cuda\" or \"cuda:N\"); on " +
                                  device::name(device_) + " the model computes in float32 (\"fp32\")");
  params_.set_device(device_);
  context_parallel_ = options.context_parallel;
  name_prefix_ = options.name_prefix;
  head_name_prefix_ = options.head_name_prefix;
  splice_tokens_ = options.splice_tokens;
  produces_loss_ = !options.output_head;
  if (options.expert_tensor_group != nullptr && options.expert_tensor_group->size() > 1) {
    expert_tensor_group_ = options.expert_tensor_group;
    params_.set_expert_tensor_parallel(static_cast<int32_t>(expert_tensor_group_->rank()),
                                       static_cast<int32_t>(expert_tensor_group_->size()));
  }
  if (options.tensor_group != nullptr && options.tensor_group->size() > 1) {
    tensor_group_ = options.tensor_group;
    params_.set_tensor_parallel(static_cast<int32_t>(tensor_group_->rank()),
                                static_cast<int32_t>(tensor_group_->size()));
    settings_.pad_vocabulary(tensor_group_->size());
    sequence_parallel_ = settings_.sequence_parallel;
    settings_.layer_config["sequence_parallel"] = sequence_parallel_;
    if (sequence_parallel_ && settings_.seq_length % tensor_group_->size() != 0)
      throw config::ConfigError("model.seq_length",
                                "sequence parallelism gives each of the " +
                                    std::to_string(tensor_group_->size()) +
                                    " tp ranks an equal block of every microbatch's tokens: " +
                                    std::to_string(settings_.seq_length) + " is not divisible by tp");
  } else if (options.padding_tp > 1) {
    settings_.pad_vocabulary(options.padding_tp);
  }
  settings_.sequence_parallel = sequence_parallel_;  // in effect with a tp group only
  connection_ = settings_.mhc.enabled ? make_mhc_connection(host, settings_, device_, params_)
                                      : make_residual_connection(settings_.hidden_size);
  residency_ = make_whole_residency(params_);
  // The decoder as the stack describes it (plexus/stack.h): the GPT's [*-] x num_layers, or a
  // hybrid pattern. Units are physical layers; a scheduler drives logical ones (groups).
  plan_ = plan_decoder(host, run_config);
  if (plan_.mtp_depths > 0 && settings_.mhc.enabled)
    throw config::ConfigError("mhc.enabled",
                              plan_.summary + " has " + std::to_string(plan_.mtp_depths) +
                                  " multi-token-prediction block(s), whose layers run on a plain "
                                  "residual stream: mHC with MTP is not supported");
  model_config_ = std::make_unique<ConfigHandle>(boost::json::value(settings_.layer_config), "model");
  if (options.placement.chunks.empty()) options.placement = ModelPlacement::whole(plan_);
  check_placement(options.placement, plan_);
  if (options.pipeline_group != nullptr && options.pipeline_group->size() > 1)
    link_ = std::make_unique<PipelineLink>(*options.pipeline_group, options.model_chunks);
  for (const ChunkSpec& chunk : options.placement.chunks) build_chunk(run_config.at("model"), chunk);
  if (!splice_tokens_.empty() && (sequence_parallel_ || context_parallel_))
    throw config::ConfigError(sequence_parallel_ ? "model.sequence_parallel" : "distributed.topology",
                              "a MIMO language model replaces its special tokens' embeddings by its "
                              "modalities' (the splice), which needs each rank's whole sequences: "
                              "sequence and context parallelism are not supported with it");
}

Model::~Model() = default;

int64_t Model::stream_seq(int64_t seq) const noexcept {
  return sequence_parallel_ ? seq / tensor_group_->size() : seq;
}

void Model::build_chunk(const boost::json::value& model_section, const ChunkSpec& spec) {
  const auto section = [&](const char* name, UnitRole role, uint32_t layer_index, std::string prefix,
                           std::string label) {
    return UnitSource::of_section(model_section, name, role, layer_index, std::move(prefix),
                                  std::move(label));
  };
  Chunk chunk;
  chunk.index = spec.index;
  chunk.first_unit = units_.size();
  chunk.embedding = spec.embedding;
  chunk.head = spec.output_layers;
  if (spec.embedding) {
    chunk.logical.push_back({units_.size(), 1});
    build_unit(section("embedding", UnitRole::embedding, 0, "", "embedding"));
  }
  int64_t logical = -1;
  for (const DecoderLayerPlan& layer : plan_.layers) {
    if (layer.mtp_depth != 0 || layer.logical < spec.first_layer || layer.logical >= spec.end_layer) continue;
    if (static_cast<int64_t>(layer.logical) != logical) chunk.logical.push_back({units_.size(), 0});
    logical = layer.logical;
    ++chunk.logical.back().count;
    build_unit(UnitSource::of_layer(layer, layer.logical));
  }
  if (spec.output_layers) {
    chunk.logical.push_back({units_.size(), 1});
    build_unit(section("final_norm", UnitRole::final_norm, plan_.num_logical + 1, plan_.final_norm_prefix,
                       "final norm"));
    chunk.final_norm_unit = units_.size() - 1;
    chunk.logical.push_back({units_.size(), 1});
    build_unit(section("head", UnitRole::head, plan_.num_logical + 2, "", "head"));
    chunk.head_unit = units_.size() - 1;
    for (uint32_t depth = 1; depth <= plan_.mtp_depths; ++depth) build_mtp_depth(model_section, depth, chunk);
  }
  chunk.end_unit = units_.size();
  chunks_.push_back(std::move(chunk));
}

// MTP depth `depth` (after the head, on the chunk holding it): one scheduler unit of the rolled
// tokens' embedding (the model's embedding component: its word embeddings are the same parameter),
// the entry, the depth's decoder layers (the plan's), its final norm and the head (the model's
// head component: the same output layer). Megatron's names: mtp.layers.<depth-1>.{enorm, hnorm,
// eh_proj, final_layernorm}; the inner layers' come from the stack.
void Model::build_mtp_depth(const boost::json::value& model_section, uint32_t depth, Chunk& chunk) {
  const std::string prefix = "mtp.layers." + std::to_string(depth - 1) + ".";
  const std::string label = "mtp.layers." + std::to_string(depth - 1);
  const uint32_t base = plan_.num_logical + 3 + (depth - 1) * 4;  // numbers after the head's
  const auto section = [&](const char* name, UnitRole role, uint32_t index, std::string unit_prefix,
                           const std::string& what) {
    return UnitSource::of_section(model_section, name, role, index, std::move(unit_prefix),
                                  label + " " + what, depth);
  };
  Chunk::MtpDepth units;
  chunk.logical.push_back({units_.size(), 0});
  units.embedding = units_.size();
  build_unit(section("embedding", UnitRole::mtp_embedding, base, "", "embedding"));
  units.entry = units_.size();
  build_unit(section("mtp_entry", UnitRole::mtp_entry, base + 1, prefix, "entry"));
  for (const DecoderLayerPlan& layer : plan_.layers) {
    if (layer.mtp_depth != depth) continue;
    build_unit(UnitSource::of_layer(layer, layer.physical));
  }
  units.norm = units_.size();
  build_unit(section("final_norm", UnitRole::mtp_norm, base + 2, prefix + "final_layernorm.", "final norm"));
  units.head = units_.size();
  build_unit(section("head", UnitRole::mtp_head, base + 3, "", "head"));
  chunk.logical.back().count = units_.size() - chunk.logical.back().first;
  chunk.mtp.push_back(units);
}

void Model::build_unit(const UnitSource& source) {
  const Component& component = host_->get(PLX_KIND_LAYER, source.component);
  auto unit = std::make_unique<Unit>();
  unit->label = source.label + " (" + source.component + ")";
  unit->component = source.component;
  unit->role = source.role;
  unit->mtp_depth = source.mtp_depth;
  if (source.layer != nullptr) {
    unit->symbol = source.layer->symbol;
    unit->physical = source.layer->physical;
    unit->logical = source.layer->logical;
    unit->segment = source.layer->segment;
  }
  unit->config = std::make_unique<ConfigHandle>(source.options, source.options_path);
  plx_layer_create_args args{};
  args.struct_size = sizeof(args);
  args.layer_index = source.layer_index;
  args.num_layers = static_cast<uint32_t>(settings_.num_layers);
  args.residual_layers = plan_.main_layers();
  args.device = device_;
  args.config = unit->config->get();
  args.model_config = model_config_->get();
  unit->layer = std::make_unique<LayerInstance>(component, args);

  const plx_layer_info info = unit->layer->info();
  // A head without a loss makes the model an encoder (a MIMO modality's): its output is the
  // model's output, and it reads the final norm's output only.
  const bool output_head = unit->role == UnitRole::head && (info.flags & PLX_LAYER_PRODUCES_LOSS) == 0;
  // The head, where it is built, says which the model is (ModelOptions::output_head tells the
  // stages without it).
  if (unit->role == UnitRole::head) produces_loss_ = !output_head;
  if (output_head) {
    if (plan_.mtp_depths > 0)
      throw std::runtime_error(unit->label +
                               ": a head without a loss (an encoder's output) cannot be "
                               "followed by multi-token-prediction depths");
  }
  const bool two_inputs = (unit->role == UnitRole::head && !output_head) ||
                          unit->role == UnitRole::mtp_head || unit->role == UnitRole::mtp_entry;
  const uint32_t inputs_expected = two_inputs ? 2 : 1;
  if (info.num_inputs != inputs_expected || info.num_outputs < 1 || info.num_stages < 1)
    throw std::runtime_error(
        unit->label + ": as the model's " + role_name(unit->role) + " a layer needs " +
        std::to_string(inputs_expected) + " input(s), 1 or more outputs and stages; it declares " +
        std::to_string(info.num_inputs) + " inputs, " + std::to_string(info.num_outputs) + " outputs, " +
        std::to_string(info.num_stages) + " stages");
  if (unit->role == UnitRole::mtp_head && (info.flags & PLX_LAYER_PRODUCES_LOSS) == 0)
    throw std::runtime_error(unit->label +
                             ": the model's MTP head must produce a loss (PLX_LAYER_PRODUCES_LOSS)");
  if (context_parallel_ && (info.flags & PLX_LAYER_CONTEXT_PARALLEL) == 0)
    throw std::runtime_error(
        unit->label +
        ": the layer does not declare PLX_LAYER_CONTEXT_PARALLEL (ABI 1.9), so it is not known "
        "to be correct on a cp rank's chunks of each sequence; set "
        "distributed.topology.options.cp to 1");
  unit->num_outputs = info.num_outputs;
  for (uint32_t s = 0; s < info.num_stages; ++s) unit->stages.push_back(unit->layer->stage(s));
  for (uint32_t p = 0; p < info.num_params; ++p) {
    const std::string& model_prefix =
        unit->role == UnitRole::head && !head_name_prefix_.empty() ? head_name_prefix_ : name_prefix_;
    const std::size_t i = params_.declare(unit->layer->param(p), model_prefix + source.prefix, unit->label);
    unit->params.push_back(i);
    unit->param_views.push_back(params_[i].value.view());
    unit->grad_views.push_back(params_[i].grad.view());
  }
  // A buffer (PLX_PARAM_BUFFER) gets no gradient: backward never makes it ready.
  for (std::size_t i : unit->params)
    if (!params_[i].is_buffer()) unit->gradient_params.push_back(i);
  if (unit->role == UnitRole::decoder) {
    const std::string connection_prefix = name_prefix_ + source.prefix + source.layer->connection_prefix;
    for (std::size_t i : connection_->declare(units_.size(), connection_prefix, unit->label, params_))
      unit->gradient_params.push_back(i);
  }
  units_.push_back(std::move(unit));
}

void Model::initialize_one(std::size_t i, uint64_t seed) {
  Parameter& p = params_[i];
  if (p.init != PLX_INIT_CUSTOM) {
    initialize_parameter(p, seed);
    return;
  }
  // A custom initializer belongs to the layer that declared the parameter. It fills the whole
  // tensor (ABI 1.8), of which a tensor-parallel rank keeps its shard.
  for (const auto& unit : units_) {
    for (std::size_t k = 0; k < unit->params.size(); ++k) {
      if (unit->params[k] != i || unit->label != p.declared_by) continue;
      if (!p.tp.split()) {
        DLTensor view = p.value.view();
        unit->layer->init_param(static_cast<uint32_t>(k), view, seed ^ stable_hash(p.name));
        continue;
      }
      Tensor whole(p.whole_shape, p.value.dtype(), p.value.device());
      DLTensor view = whole.view();
      unit->layer->init_param(static_cast<uint32_t>(k), view, seed ^ stable_hash(p.name));
      Tensor shard(p.shape, p.value.dtype());
      copy_shard(whole.to(DLDevice{kDLCPU, 0}), p.tp, p.tp.rank, shard);
      p.value.copy_from(shard);
    }
  }
}

void Model::initialize(uint64_t seed) {
  residency_->write_each([&](std::size_t p) { initialize_one(p, seed); });
}

void Model::write_parameters(const std::function<void(std::size_t)>& write) {
  residency_->write_each(write);
}

std::size_t Model::num_chunks() const noexcept {
  return chunks_.size();
}

bool Model::pipelined() const noexcept {
  return link_ != nullptr;
}

ShardedParameters* Model::sharded() noexcept {
  return residency_->sharded();
}

const ShardedParameters* Model::sharded() const noexcept {
  return residency_->sharded();
}

// Each chunk is cut on its own: the embedding; every `layers_per_unit` logical decoder layers
// (a GPT layer's attention and MLP, a HybridStack group); the output layers (final norm and head).
void Model::shard_parameters(const Component& strategy, plx_config options, int64_t layers_per_unit,
                             const distributed::Runtime& runtime, const std::vector<bool>& alone) {
  const std::string key = "distributed.data_parallel.layers_per_unit";
  if (layers_per_unit < 1)
    throw config::ConfigError(
        key, "expected 1 or more logical layers per unit, got " + std::to_string(layers_per_unit));
  std::vector<FsdpUnit> fsdp;
  // A parameter's values live in the buffer of the first FSDP unit that lists it (its owner);
  // later units using it (the tied head, the MTP depths' embedding and head) read that buffer.
  std::vector<std::size_t> owner(params_.size(), SIZE_MAX);
  const auto add = [&](std::string name, const LogicalUnit* first, std::size_t logical_count) {
    FsdpUnit unit;
    unit.name = std::move(name);
    unit.first_unit = first->first;
    const LogicalUnit& end = first[logical_count - 1];
    unit.last_unit = end.first + end.count - 1;
    for (std::size_t u = unit.first_unit; u <= unit.last_unit; ++u)
      for (std::size_t p : units_[u]->gradient_params) {
        unit.params.push_back(p);
        if (owner[p] == SIZE_MAX) owner[p] = fsdp.size();
      }
    fsdp.push_back(std::move(unit));
  };
  const auto owns_alone = [&](std::size_t u) {
    return std::any_of(units_[u]->params.begin(), units_[u]->params.end(),
                       [&](std::size_t p) { return p < alone.size() && alone[p] && owner[p] == SIZE_MAX; });
  };
  for (const Chunk& chunk : chunks_) {
    const std::size_t begin = chunk.embedding ? 1 : 0;
    const std::size_t end = chunk.logical.size() - (chunk.head ? 2 + chunk.mtp.size() : 0);
    const auto decoder_layers = static_cast<int64_t>(end - begin);
    if (layers_per_unit > 1 && layers_per_unit >= decoder_layers)
      throw config::ConfigError(
          key, std::to_string(layers_per_unit) + " would make the whole decoder (" +
                   std::to_string(decoder_layers) +
                   " logical layers) one unit, whose values would then be gathered whole for every layer's "
                   "forward and backward: choose fewer layers per unit (1 is a unit per logical layer)");
    if (decoder_layers % layers_per_unit != 0)
      throw config::ConfigError(key, std::to_string(layers_per_unit) + " does not divide the decoder's " +
                                         std::to_string(decoder_layers) +
                                         " logical layers; every unit must hold the same number of layers");
    if (chunk.embedding) add("embedding", &chunk.logical[0], 1);
    for (std::size_t l = begin; l < end; l += static_cast<std::size_t>(layers_per_unit)) {
      const Unit& first = *units_[chunk.logical[l].first];
      // "decoder.layers.4", or "decoder.layers.4-5" for a unit of two logical layers.
      std::string name = "decoder.layers." + std::to_string(first.logical);
      if (layers_per_unit > 1)
        name.append(1, '-').append(std::to_string(first.logical + layers_per_unit - 1));
      add(name, &chunk.logical[l], static_cast<std::size_t>(layers_per_unit));
    }
    if (!chunk.head) continue;
    const Unit& head = *units_[chunk.logical[end + 1].first];
    const bool head_alone = std::any_of(head.params.begin(), head.params.end(),
                                        [&](std::size_t p) { return p < alone.size() && alone[p]; });
    if (head_alone) {  // the tied copy keeps a buffer of its own, laid out as its owner's
      add("final norm", &chunk.logical[end], 1);
      add("output layer", &chunk.logical[end + 1], 1);
    } else {
      add("output layers", &chunk.logical[end], 2);
    }
    for (std::size_t d = 0; d < chunk.mtp.size(); ++d) {
      const std::string name = "mtp.layers." + std::to_string(d);
      const LogicalUnit& depth = chunk.logical[end + 2 + d];
      if (!owns_alone(chunk.mtp[d].embedding)) {
        add(name, &depth, 1);
        continue;
      }
      // Untied, the last stage's first use of its word-embedding copy is the first depth's
      // embedding: a unit of its own, so the copy keeps a buffer laid out as its owner's.
      const LogicalUnit embedding{chunk.mtp[d].embedding, 1};
      const LogicalUnit rest{chunk.mtp[d].entry, depth.first + depth.count - chunk.mtp[d].entry};
      add(name + " embedding", &embedding, 1);
      add(name, &rest, 1);
    }
  }
  for (std::size_t f = 0; f < fsdp.size(); ++f)
    for (std::size_t p : fsdp[f].params)
      if (p < alone.size() && alone[p] && owner[p] == f && fsdp[f].params.size() != 1)
        throw config::ConfigError(key, "parameter " + params_[p].name +
                                           " is held by two pipeline stages and must be "
                                           "alone in its FSDP unit's buffer, but unit " +
                                           fsdp[f].name + " holds " + std::to_string(fsdp[f].params.size()) +
                                           " parameters");
  residency_ = make_sharded_residency(params_, fsdp, units_.size(), strategy, options, runtime, device_);
}

}  // namespace plexus
