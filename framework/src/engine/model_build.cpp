// Assembling the model from its layer components and declaring their parameters.
#include <boost/json.hpp>
#include <string>

#include "engine/model_internal.hpp"
#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/engine/random.hpp"

namespace plexus {

namespace {

// The word a unit's label uses for a pattern symbol: "decoder.layers.0 attention (...)".
std::string layer_kind_word(const std::string& symbol) {
  if (symbol == "*") return "attention";
  if (symbol == "-") return "mlp";
  if (symbol == "M") return "mamba";
  if (symbol == "E") return "moe";
  return "layer '" + symbol + "'";
}

const char* role_name(UnitRole role) {
  switch (role) {
    case UnitRole::embedding: return "embedding";
    case UnitRole::final_norm: return "final norm";
    case UnitRole::head: return "head";
    case UnitRole::decoder: break;
  }
  return "decoder layer";
}

}  // namespace

Model::Model(const PluginHost& host, const boost::json::value& run_config, bool sharded)
    : settings_(ModelSettings::from_run_config(run_config)), host_(&host) {
  params_.set_deferred(sharded);
  if (const auto* run = run_config.as_object().if_contains("run");
      run != nullptr && run->as_object().contains("device")) {
    const std::string text(run->at("device").as_string());
    try {
      device_ = device::parse(text);
      device::require(device_);
    } catch (const std::exception& e) {
      throw config::ConfigError("run.device", e.what());
    }
  }
  if (plx_dtype_equal(settings_.activation_dtype, plx_dtype_bf16()) && device_.device_type != kDLCUDA)
    throw config::ConfigError("run.precision",
                              "\"bf16\" needs a CUDA device (run.device = \"cuda\" or \"cuda:N\"); on " +
                                  device::name(device_) + " the model computes in float32 (\"fp32\")");
  params_.set_device(device_);
  if (settings_.mhc.enabled) {
    mhc_config_ = std::make_unique<ConfigHandle>(settings_.mhc.options, "mhc.options");
    mhc_backend_ = std::make_unique<MhcBackend>(host.get(PLX_KIND_FUSION_BACKEND, settings_.mhc.backend),
                                                device_, mhc_config_->get());
  }
  // The decoder as the stack describes it (plexus/stack.h): the GPT's [*-] x num_layers, or a
  // hybrid pattern. Units are physical layers; a scheduler drives logical ones (groups).
  const DecoderPlan plan = plan_decoder(host, run_config);
  if (plan.mtp_depths > 0)
    throw config::ConfigError("model.pattern", "multi-token prediction ('/' in the pattern) is parsed, but training "
                                               "MTP layers is not built yet: remove the '/...' parts");
  final_norm_aliases_ = plan.final_norm_aliases;
  // Depth-scaled initialization counts the layers that add to the residual stream; Megatron's
  // rule differs between GPT (std / sqrt(2 num_layers)) and hybrid models (std / sqrt(num_layers)
  // with num_layers the physical count): layers read which from "is_hybrid_model".
  settings_.layer_config["is_hybrid_model"] = plan.has_pattern;
  model_config_ = std::make_unique<ConfigHandle>(boost::json::value(settings_.layer_config), "model");
  const auto& model = run_config.at("model");
  const auto section = [&](const char* name) {
    return LayerSource{std::string(model.at(name).at("component").as_string()), model.at(name).at("options"),
                       std::string("model.") + name + ".options"};
  };
  logical_units_.push_back({units_.size(), 1});
  build_unit(section("embedding"), UnitRole::embedding, "", "embedding", 0, "");
  for (const DecoderLayerPlan& layer : plan.layers) {
    if (layer.mtp_depth != 0) continue;
    if (logical_units_.size() < 2 + layer.logical) logical_units_.push_back({units_.size(), 0});
    ++logical_units_.back().count;
    const std::string name = layer.checkpoint_prefix.substr(0, layer.checkpoint_prefix.size() - 1);
    build_unit({layer.component, layer.options, layer.options_path}, UnitRole::decoder, layer.checkpoint_prefix,
               name + " " + layer_kind_word(layer.symbol), layer.logical, layer.connection_prefix);
    Unit& built = *units_.back();
    built.symbol = layer.symbol;
    built.physical = layer.physical;
    built.logical = layer.logical;
    built.segment = layer.segment;
  }
  logical_units_.push_back({units_.size(), 1});
  build_unit(section("final_norm"), UnitRole::final_norm, plan.final_norm_prefix, "final norm", plan.num_logical + 1,
             "");
  logical_units_.push_back({units_.size(), 1});
  build_unit(section("head"), UnitRole::head, "", "head", plan.num_logical + 2, "");
}

Model::~Model() = default;

void Model::build_unit(const LayerSource& source, UnitRole role, const std::string& prefix, const std::string& label,
                       uint32_t layer_index, const std::string& connection_prefix) {
  const Component& component = host_->get(PLX_KIND_LAYER, source.component);
  auto unit = std::make_unique<Unit>();
  unit->label = label + " (" + source.component + ")";
  unit->component = source.component;
  unit->role = role;
  unit->config = std::make_unique<ConfigHandle>(source.options, source.options_path);
  plx_layer_create_args args{};
  args.struct_size = sizeof(args);
  // Decoder layers are numbered by their logical layer (a GPT layer's attention and MLP share
  // one, for depth-scaled init); the others by their position in the stack.
  args.layer_index = layer_index;
  args.num_layers = static_cast<uint32_t>(settings_.num_layers);
  args.device = device_;
  args.config = unit->config->get();
  args.model_config = model_config_->get();
  unit->layer = std::make_unique<LayerInstance>(component, args);

  const plx_layer_info info = unit->layer->info();
  const uint32_t inputs_expected = unit->role == UnitRole::head ? 2 : 1;
  if (info.num_inputs != inputs_expected || info.num_outputs < 1 || info.num_stages < 1)
    throw std::runtime_error(
        unit->label + ": as the model's " + role_name(role) + " a layer needs " + std::to_string(inputs_expected) +
        " input(s), 1 or more outputs and stages; it declares " + std::to_string(info.num_inputs) +
        " inputs, " + std::to_string(info.num_outputs) + " outputs, " + std::to_string(info.num_stages) +
        " stages");
  if (unit->role == UnitRole::head && (info.flags & PLX_LAYER_PRODUCES_LOSS) == 0)
    throw std::runtime_error(unit->label +
                             ": the model's head must produce a loss (PLX_LAYER_PRODUCES_LOSS)");
  unit->num_outputs = info.num_outputs;
  for (uint32_t s = 0; s < info.num_stages; ++s) unit->stages.push_back(unit->layer->stage(s));
  for (uint32_t p = 0; p < info.num_params; ++p) {
    const std::size_t i = params_.declare(unit->layer->param(p), prefix, unit->label);
    unit->params.push_back(i);
    unit->param_views.push_back(params_[i].value.view());
    unit->grad_views.push_back(params_[i].grad.view());
  }
  if (settings_.mhc.enabled && unit->role == UnitRole::decoder) declare_mhc_parameters(*unit, prefix + connection_prefix);
  // A buffer (PLX_PARAM_BUFFER) gets no gradient: backward never makes it ready.
  for (std::size_t i : unit->params)
    if (!params_[i].is_buffer()) unit->gradient_params.push_back(i);
  if (unit->mhc)
    unit->gradient_params.insert(
        unit->gradient_params.end(),
        {unit->mhc->phi, unit->mhc->alpha_pre, unit->mhc->alpha_post, unit->mhc->alpha_res, unit->mhc->bias});
  units_.push_back(std::move(unit));
}

// The connection's own parameters (mhc.md): phi [n*C, n*n + 2n] Xavier-uniform, the three gates
// (scalars) at init_gating_factor and the bias b [n*n + 2n] at zero; gates and bias without
// weight decay. phi is held as the "mhc" family takes it; checkpoints store its transpose, the
// layout of Megatron's nn.Linear (checkpoint/stored_tensor.hpp).
void Model::declare_mhc_parameters(Unit& unit, const std::string& prefix) {
  const int64_t n = settings_.mhc.streams, c = settings_.hidden_size, width = n * n + 2 * n;
  const auto declare = [&](const char* name, std::initializer_list<int64_t> dims, uint32_t init, double a,
                           uint32_t flags) {
    plx_param_spec spec{};
    spec.struct_size = sizeof(spec);
    spec.flags = flags;
    spec.name = name;
    spec.desc.ndim = static_cast<uint32_t>(dims.size());
    spec.desc.dtype = plx_dtype_f32();
    std::copy(dims.begin(), dims.end(), spec.desc.dims);
    spec.init = init;
    spec.init_a = a;
    const std::size_t i = params_.declare(spec, prefix, unit.label + " mHC");  // = Unit::Mhc::label
    return i;
  };
  auto mhc = std::make_unique<Unit::Mhc>();
  mhc->phi = declare("mapping_proj.weight", {n * c, width}, PLX_INIT_XAVIER_UNIFORM, 1.0, 0);
  mhc->alpha_pre =
      declare("alpha_pre", {1}, PLX_INIT_CONSTANT, settings_.mhc.init_gating, PLX_PARAM_NO_WEIGHT_DECAY);
  mhc->alpha_post =
      declare("alpha_post", {1}, PLX_INIT_CONSTANT, settings_.mhc.init_gating, PLX_PARAM_NO_WEIGHT_DECAY);
  mhc->alpha_res =
      declare("alpha_res", {1}, PLX_INIT_CONSTANT, settings_.mhc.init_gating, PLX_PARAM_NO_WEIGHT_DECAY);
  mhc->bias = declare("bias", {width}, PLX_INIT_ZEROS, 0.0, PLX_PARAM_NO_WEIGHT_DECAY);
  mhc->alpha = Tensor({3}, plx_dtype_f32(), device_);
  mhc->label = unit.label + " mHC";
  unit.mhc = std::move(mhc);
}

void Model::initialize_one(std::size_t i, uint64_t seed) {
  Parameter& p = params_[i];
  if (p.init != PLX_INIT_CUSTOM) {
    initialize_parameter(p, seed);
    return;
  }
  // A custom initializer belongs to the layer that declared the parameter.
  for (const auto& unit : units_) {
    for (std::size_t k = 0; k < unit->params.size(); ++k) {
      if (unit->params[k] != i || unit->label != p.declared_by) continue;
      DLTensor view = p.value.view();
      unit->layer->init_param(static_cast<uint32_t>(k), view, seed ^ stable_hash(p.name));
    }
  }
}

void Model::initialize(uint64_t seed) {
  if (!sharded_) {
    for (std::size_t i = 0; i < params_.size(); ++i) initialize_one(i, seed);
    return;
  }
  // Every value is a function of (seed, name), so each rank writes each unit whole and keeps
  // its part: the same values as one process, with one unit whole at a time.
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].is_buffer()) initialize_one(i, seed);
  for (std::size_t f = 0; f < sharded_->num_units(); ++f) {
    sharded_->begin_write(f);
    for (const ShardedParameters::Buffer& b : sharded_->buffers())
      if (b.fsdp == f)
        for (std::size_t i : b.params) initialize_one(i, seed);
    sharded_->end_write(f);
  }
}

}  // namespace plexus
