#include "params.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "checks.hpp"
#include "plexus/cpp/error.hpp"

namespace plexus::mamba {
namespace {

using plexus::sdk::Error;

plx_param_spec spec(const char* name, std::initializer_list<int64_t> dims, uint32_t init, double a, double b,
                    uint32_t flags) {
  plx_param_spec p{};
  p.struct_size = sizeof(p);
  p.flags = flags;
  p.name = name;
  p.desc.dtype = plx_dtype_f32();
  for (int64_t d : dims) p.desc.dims[p.desc.ndim++] = d;
  p.init = init;
  p.init_a = a;
  p.init_b = b;
  return p;
}

// A uniform draw in [0, 1) for element `i` of a parameter: SplitMix64 of the seed and the index,
// a counter-based generator (no state carried from one element to the next).
double uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// A_log = log(U(A_min, A_max)), so A = -exp(A_log) starts in [-A_max, -A_min].
double a_log_init(const MixerConfig& c, double u) {
  return std::log(c.a_init_min + u * (c.a_init_max - c.a_init_min));
}

// dt_bias = softplus^-1(dt) with dt = exp(U(log dt_min, log dt_max)) clamped to at least
// dt_init_floor, so softplus(dt_bias) = dt at the start: inv(dt) = dt + log(-expm1(-dt)).
double dt_bias_init(const MixerConfig& c, double u) {
  const double lo = std::log(c.dt_min), hi = std::log(c.dt_max);
  const double dt = std::max(std::exp(lo + u * (hi - lo)), c.dt_init_floor);
  return dt + std::log(-std::expm1(-dt));
}

}  // namespace

// Marks the last spec as this rank's shard along `dim`, of the whole parts `parts` (empty: one).
static void split(ParamList& list, int32_t dim, std::vector<int64_t> parts) {
  plx_param_spec& p = list.specs.back();
  p.flags |= PLX_PARAM_TENSOR_PARALLEL;
  p.tp_dim = dim;
  if (parts.empty()) return;
  const std::vector<int64_t>& kept = list.parts->emplace_back(std::move(parts));
  p.tp_num_parts = static_cast<uint32_t>(kept.size());
  p.tp_part_sizes = kept.data();
}

ParamList declare_params(const MixerConfig& c, uint32_t num_layers) {
  constexpr uint32_t no_decay = PLX_PARAM_NO_WEIGHT_DECAY;
  const int64_t conv_dim = c.conv_dim(), w = c.conv_width;
  // PyTorch's default for nn.Conv1d, which Megatron keeps: kaiming_uniform(a = sqrt 5) for the
  // weight and U(+-1/sqrt(fan_in)) for the bias, fan_in = 1 * d_conv; both are U(+-1/sqrt(d_conv)).
  const double conv_bound = 1.0 / std::sqrt(static_cast<double>(w));
  const double weight_bound = c.conv_init.value_or(conv_bound);
  ParamList out;
  out.parts->reserve(3);  // in_proj's and the convolution's two: the specs point into them
  ParamIndex& ix = out.index;
  // Tensor parallelism (Megatron's mamba_mixer): each rank holds its heads' share of every
  // component, so in_proj's rows are five parts [z, x, B, C, dt] and the convolution's three
  // [x, B, C]; dt_bias, A_log, D and the gated norm are split by heads, out_proj by columns. The
  // pre-norm is whole on every rank.
  const int64_t gn = c.whole_groups * c.state_dim;
  auto& s = out.specs;
  const auto next = [&] { return static_cast<uint32_t>(s.size()); };

  ix.norm_weight = next();
  // Megatron's Transformer Engine hybrid spec fuses the pre-norm into the mixer's input
  // projection, which then holds its weight and bias: the second spelling of their names.
  s.push_back(spec("norm.weight", {c.d_model}, PLX_INIT_ONES, 0, 0, no_decay));
  s.back().te_name = "mixer.in_proj.layer_norm_weight";
  if (!c.rms_prenorm) {
    ix.norm_bias = next();
    s.push_back(spec("norm.bias", {c.d_model}, PLX_INIT_ZEROS, 0, 0, no_decay));
    s.back().te_name = "mixer.in_proj.layer_norm_bias";
  }
  ix.in_proj = next();
  s.push_back(spec("mixer.in_proj.weight", {c.in_proj_rows(), c.d_model}, PLX_INIT_NORMAL, c.init_std, 0, 0));
  split(out, 0, {c.whole_d_inner, c.whole_d_inner, gn, gn, c.whole_heads});
  ix.conv_weight = next();
  s.push_back(
      spec("mixer.conv1d.weight", {conv_dim, 1, w}, PLX_INIT_UNIFORM, -weight_bound, weight_bound, 0));
  split(out, 0, {c.whole_d_inner, gn, gn});
  ix.conv_bias = next();
  s.push_back(spec("mixer.conv1d.bias", {conv_dim}, PLX_INIT_UNIFORM, -conv_bound, conv_bound, no_decay));
  split(out, 0, {c.whole_d_inner, gn, gn});
  ix.dt_bias = next();
  s.push_back(spec("mixer.dt_bias", {c.heads}, PLX_INIT_CUSTOM, 0, 0, no_decay));
  split(out, 0, {});
  ix.a_log = next();
  s.push_back(spec("mixer.A_log", {c.heads}, PLX_INIT_CUSTOM, 0, 0, no_decay));
  split(out, 0, {});
  ix.d = next();
  s.push_back(spec("mixer.D", {c.heads}, PLX_INIT_ONES, 0, 0, no_decay));
  split(out, 0, {});
  ix.gated_norm_weight = next();
  s.push_back(spec("mixer.norm.weight", {c.d_inner}, PLX_INIT_ONES, 0, 0, no_decay));
  split(out, 0, {});
  // Megatron's output_layer_init_method for hybrid models: N(0, std / sqrt(num_layers)), the
  // number of layers counting every layer of the stack (GPT's sublayers use sqrt(2 num_layers)).
  ix.out_proj = next();
  s.push_back(spec("mixer.out_proj.weight", {c.d_model, c.d_inner}, PLX_INIT_NORMAL,
                   c.init_std / std::sqrt(static_cast<double>(num_layers)), 0, 0));
  split(out, 1, {});
  return out;
}

void init_custom_param(const MixerConfig& c, const ParamList& params, uint32_t index, DLTensor& value,
                       uint64_t seed) {
  const ParamIndex& ix = params.index;
  if (index >= params.specs.size())
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) + " has " +
                                              std::to_string(params.specs.size()) +
                                              " parameters; there is no parameter " + std::to_string(index));
  if (index != ix.a_log && index != ix.dt_bias)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string(kComponent) + ": parameter " + params.specs[index].name +
                    " has no custom initializer (only mixer.A_log and mixer.dt_bias)");
  const plx_param_spec& p = params.specs[index];
  const std::string what = std::string("parameter ") + p.name;
  const Precision precision = precision_of(value.dtype, what);
  const int64_t whole[1] = {c.whole_heads};  // the host fills the whole tensor (ABI 1.8)
  expect_tensor(value, DLDevice{kDLCPU, 0}, dtype_of(precision), whole, 1, what);
  const auto n = static_cast<uint64_t>(plx_numel(&value));
  for (uint64_t i = 0; i < n; ++i) {
    const double u = uniform(seed, i);
    const double v = index == ix.a_log ? a_log_init(c, u) : dt_bias_init(c, u);
    if (precision == Precision::f32)
      data<float>(value)[i] = static_cast<float>(v);
    else
      data<double>(value)[i] = v;
  }
}

}  // namespace plexus::mamba
