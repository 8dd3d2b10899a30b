#include "config.hpp"

#include <climits>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "plexus/cpp/error.hpp"

namespace plexus::mamba {
namespace {

using plexus::sdk::Error;

// One table of the options, their defaults and docs: the schema and MixerConfig::read both come
// from it, so they cannot disagree.
struct IntOption {
  const char* key;
  int64_t fallback;
  const char* doc;
};
struct NumberOption {
  const char* key;
  double fallback;
  bool strictly_positive;  // else >= 0
  const char* doc;
};

const IntOption kIntOptions[] = {
    {"mamba_state_dim", 128, "N, the state size of every head (Megatron-LM's mamba_state_dim)"},
    {"mamba_head_dim", 64, "P, the channels of every head (mamba_head_dim)"},
    {"mamba_num_groups", 8,
     "G, groups of heads that share B and C; must divide the number of heads (mamba_num_groups)"},
    {"expand", 2, "d_inner = expand * hidden_size, unless mamba_num_heads is set"},
    {"d_conv", 4, "W, the width of the causal depthwise convolution"},
    {"chunk_size", 128,
     "Q, the chunk length of the chunked SSD scan (any length; sequences need not be a multiple)"},
};
const NumberOption kNumberOptions[] = {
    {"norm_epsilon", 1e-5, true, "eps of the gated, grouped RMSNorm before out_proj"},
    {"dt_min", 0.001, true, "dt_bias initialization: dt log-uniform in [dt_min, dt_max]"},
    {"dt_max", 0.1, true, "dt_bias initialization: upper end of dt"},
    {"dt_init_floor", 1e-4, false, "dt_bias initialization: dt is clamped to at least this"},
};
constexpr const char* kHeadsKey = "mamba_num_heads";
constexpr const char* kConvInitKey = "conv_init";
constexpr const char* kARangeKey = "A_init_range";

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

[[noreturn]] void bad_option(const std::string& key, const std::string& problem) {
  throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) + " option " + key + " " + problem);
}

int64_t read_int(const plexus::sdk::Host& host, plx_config options, const IntOption& o) {
  const int64_t v = host.config_int_if(options, o.key).value_or(o.fallback);
  if (v < 1) bad_option(o.key, std::string("must be at least 1, got ") + std::to_string(v));
  return v;
}

// A number option, or nullopt when absent. (Host has config_int_if only; the number getter
// reports an absent key as PLX_ERR_NOT_FOUND.)
std::optional<double> number_if(const plexus::sdk::Host& host, plx_config options, const char* key) {
  const plx_host_api* api = host.api();
  double v = 0;
  const plx_status s = api->config_get_number(api->ctx, options, key, &v);
  if (s == PLX_ERR_NOT_FOUND) return std::nullopt;
  if (s != PLX_OK) throw Error::from_host(s);
  return v;
}

double read_number(const plexus::sdk::Host& host, plx_config options, const NumberOption& o) {
  const double v = number_if(host, options, o.key).value_or(o.fallback);
  const bool ok = std::isfinite(v) && (o.strictly_positive ? v > 0 : v >= 0);
  if (!ok)
    bad_option(o.key, std::string("must be a finite number ") + (o.strictly_positive ? "> 0" : ">= 0") +
                          ", got " + number_text(v));
  return v;
}

// A_init_range: a JSON array of two numbers. The host hands arrays over as JSON text only.
std::vector<double> read_range(const plexus::sdk::Host& host, plx_config options) {
  const plx_host_api* api = host.api();
  plx_config child = nullptr;
  const plx_status s = api->config_get_child(api->ctx, options, kARangeKey, &child);
  if (s == PLX_ERR_NOT_FOUND) return {1.0, 16.0};
  if (s != PLX_OK) throw Error::from_host(s);
  const char* json = nullptr;
  if (api->config_to_json(api->ctx, child, &json) != PLX_OK) throw Error::from_host(PLX_ERR_INTERNAL);
  const std::string text = json;
  std::vector<double> values;
  bool ok = text.size() >= 2 && text.front() == '[' && text.back() == ']';
  for (std::size_t i = 1; ok && i + 1 < text.size();) {
    const char* begin = text.c_str() + i;
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    ok = end != begin;
    values.push_back(v);
    i += static_cast<std::size_t>(end - begin);
    if (ok && i + 1 < text.size()) ok = text[i++] == ',';
  }
  if (!ok || values.size() != 2)
    bad_option(kARangeKey, "must be an array of two numbers [min, max], got " + text);
  return values;
}

void check_blas_size(int64_t v, const std::string& what) {
  if (v > INT_MAX)
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) + ": " + what + " = " + std::to_string(v) +
                                              " is larger than the BLAS's int allows (" +
                                              std::to_string(INT_MAX) + ")");
}

}  // namespace

MixerConfig MixerConfig::read(const plexus::sdk::Host& host, plx_config options, plx_config model) {
  MixerConfig c;
  // The model section (the engine validated it; a direct caller may not have).
  c.d_model = host.config_int(model, "hidden_size");
  if (c.d_model < 1)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string("model hidden_size must be at least 1, got ") + std::to_string(c.d_model));
  const std::string norm = host.config_string(model, "normalization");
  if (norm != "RMSNorm" && norm != "LayerNorm")
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "model normalization must be \"RMSNorm\" or \"LayerNorm\", got \"" + norm + "\"");
  c.rms_prenorm = norm == "RMSNorm";
  c.prenorm_eps = host.config_number(model, "layernorm_epsilon");
  if (!(c.prenorm_eps >= 0) || !std::isfinite(c.prenorm_eps))
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string("model layernorm_epsilon must be >= 0, got ") + number_text(c.prenorm_eps));
  c.init_std = host.config_number(model, "init_method_std");
  if (!(c.init_std > 0) || !std::isfinite(c.init_std))
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "model init_method_std must be a positive number, got " + number_text(c.init_std));

  c.state_dim = read_int(host, options, kIntOptions[0]);
  c.head_dim = read_int(host, options, kIntOptions[1]);
  c.groups = read_int(host, options, kIntOptions[2]);
  c.expand = read_int(host, options, kIntOptions[3]);
  c.conv_width = read_int(host, options, kIntOptions[4]);
  c.chunk = read_int(host, options, kIntOptions[5]);
  c.norm_eps = read_number(host, options, kNumberOptions[0]);
  c.dt_min = read_number(host, options, kNumberOptions[1]);
  c.dt_max = read_number(host, options, kNumberOptions[2]);
  c.dt_init_floor = read_number(host, options, kNumberOptions[3]);

  // Megatron: d_inner = expand * hidden_size and H = d_inner / P, or, with mamba_num_heads,
  // d_inner = H * P.
  if (const auto heads = host.config_int_if(options, kHeadsKey)) {
    if (*heads < 1) bad_option(kHeadsKey, std::string("must be at least 1, got ") + std::to_string(*heads));
    c.heads = *heads;
    c.d_inner = c.heads * c.head_dim;
  } else {
    c.d_inner = c.expand * c.d_model;
    if (c.d_inner % c.head_dim != 0)
      bad_option("mamba_head_dim", std::string("(") + std::to_string(c.head_dim) +
                                       ") must divide d_inner = expand * hidden_size = " +
                                       std::to_string(c.expand) + " * " + std::to_string(c.d_model) + " = " +
                                       std::to_string(c.d_inner) + " (or set mamba_num_heads)");
    c.heads = c.d_inner / c.head_dim;
  }
  if (c.heads % c.groups != 0)
    bad_option("mamba_num_groups", std::string("(") + std::to_string(c.groups) +
                                       ") must divide the number of heads, " + std::to_string(c.heads) +
                                       " (d_inner " + std::to_string(c.d_inner) + " / mamba_head_dim " +
                                       std::to_string(c.head_dim) + ")");

  const std::vector<double> range = read_range(host, options);
  c.a_init_min = range[0];
  c.a_init_max = range[1];
  if (!(c.a_init_min > 0) || !(c.a_init_max >= c.a_init_min) || !std::isfinite(c.a_init_max))
    bad_option(
        kARangeKey,
        std::string("must be [min, max] with 0 < min <= max (A = -exp(A_log) starts in -[min, max]), got [") +
            number_text(c.a_init_min) + ", " + number_text(c.a_init_max) + "]");
  if (c.dt_max < c.dt_min)
    bad_option("dt_max", std::string("(") + number_text(c.dt_max) + ") must be at least dt_min (" +
                             number_text(c.dt_min) + ")");
  if (const auto conv_init = number_if(host, options, kConvInitKey)) {
    if (!(*conv_init > 0) || !std::isfinite(*conv_init))
      bad_option(kConvInitKey, std::string("must be a finite number > 0, got ") + number_text(*conv_init));
    c.conv_init = conv_init;
  }

  check_blas_size(c.in_proj_rows(), "the in_proj rows 2 d_inner + 2 G N + H");
  check_blas_size(c.d_inner, "d_inner");
  c.whole_d_inner = c.d_inner;
  c.whole_heads = c.heads;
  c.whole_groups = c.groups;
  return c;
}

void MixerConfig::split_over(int64_t ranks, const char* group) {
  const std::string options = std::string("distributed.topology.options.") + group;
  split_heads(ranks, std::string("the ") + std::to_string(ranks) + " ranks of the " + group + " group (" +
                         options + ")");
}

MixerConfig MixerConfig::split_over_cp(int64_t cp_ranks) const {
  if (tp == 1) {
    MixerConfig c = *this;
    c.split_over(cp_ranks, "cp");
    return c;
  }
  // The whole mixer's heads over tp x cp ranks, so the message names the product the user set;
  // this rank's tp share then plays the whole mixer whose heads the cp ranks divide.
  MixerConfig c = *this;
  c.split_heads(tp * cp_ranks, "the " + std::to_string(tp) + " x " + std::to_string(cp_ranks) +
                                   " ranks of the tp and cp groups (distributed.topology.options.tp "
                                   "times cp)");
  c.tp = cp_ranks;
  c.whole_heads = heads;
  c.whole_groups = groups;
  c.whole_d_inner = d_inner;
  return c;
}

void MixerConfig::split_heads(int64_t ranks, const std::string& over) {
  const auto require = [&](int64_t value, const char* what) {
    if (value % ranks != 0)
      bad_option(what, std::string("(") + std::to_string(value) + ") is not divisible by " + over +
                           ": each rank holds whole groups of heads");
  };
  require(whole_heads, kHeadsKey);
  require(whole_groups, "mamba_num_groups");
  tp = ranks;
  heads = whole_heads / ranks;
  groups = whole_groups / ranks;
  d_inner = whole_d_inner / ranks;
}

const char* options_schema() {
  static const std::string schema = [] {
    std::string s =
        R"({"type": "object", "doc": "The Mamba-2 mixer of Megatron-LM's MambaLayer: pre-norm, in_proj, )"
        R"(causal conv, SSD, gated RMSNorm, out_proj. Option names and defaults are Megatron-LM's.", )"
        R"("properties": {)";
    for (const IntOption& o : kIntOptions)
      s += std::string("\"") + std::string(o.key) +
           "\": {\"type\": \"integer\", \"minimum\": 1, \"default\": " + std::to_string(o.fallback) +
           ", \"doc\": \"" + o.doc + "\"}, ";
    for (const NumberOption& o : kNumberOptions)
      s += std::string("\"") + std::string(o.key) + "\": {\"type\": \"number\", " +
           (o.strictly_positive ? "\"exclusive_minimum\": 0" : "\"minimum\": 0") +
           ", \"default\": " + number_text(o.fallback) + ", \"doc\": \"" + o.doc + "\"}, ";
    s += std::string("\"") + std::string(kHeadsKey) +
         "\": {\"type\": \"integer\", \"minimum\": 1, \"doc\": \"H, the number of heads; default d_inner / "
         "mamba_head_dim. When set, d_inner = H * mamba_head_dim (Megatron-LM's mamba_num_heads)\"}, ";
    s += std::string("\"") + std::string(kConvInitKey) +
         "\": {\"type\": \"number\", \"exclusive_minimum\": 0, \"doc\": \"when set, conv1d.weight starts "
         "uniform in [-conv_init, conv_init] instead of [-1/sqrt(d_conv), 1/sqrt(d_conv)]\"}, ";
    s += std::string("\"") + std::string(kARangeKey) +
         "\": {\"type\": \"array\", \"items\": {\"type\": \"number\"}, \"default\": [1, 16], \"doc\": "
         "\"[min, max]: A_log starts at log(uniform(min, max))\"}";
    return s + "}}";
  }();
  return schema.c_str();
}

}  // namespace plexus::mamba
