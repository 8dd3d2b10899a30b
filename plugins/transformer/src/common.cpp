#include "common.hpp"

#include <cmath>

#include "cuda_layers.hpp"
#include "plexus_kernels/norm.hpp"

namespace plexus::transformer {

namespace k = plexus::kernels;

int64_t positive_int(const plexus::sdk::Host& host, plx_config model, const char* key) {
  const int64_t v = host.config_int(model, key);
  if (v < 1)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string("model ") + key + " must be at least 1, got " + std::to_string(v));
  return v;
}

double positive_number(const plexus::sdk::Host& host, plx_config model, const char* key) {
  const double v = host.config_number(model, key);
  if (!(v > 0) || !std::isfinite(v))
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string("model ") + key + " must be a positive number, got " + std::to_string(v));
  return v;
}

PositionEmbedding position_embedding(const plexus::sdk::Host& host, plx_config model) {
  const std::string name = host.config_string_if(model, "position_embedding_type").value_or("rope");
  if (name == "rope") return PositionEmbedding::rope;
  if (name == "none") return PositionEmbedding::none;
  if (name == "learned_absolute") return PositionEmbedding::learned_absolute;
  throw Error(PLX_ERR_INVALID_ARGUMENT,
              "model.position_embedding_type: expected \"rope\", \"none\" or "
              "\"learned_absolute\", got \"" +
                  name + "\"");
}

double output_init_std(const plx_layer_create_args& args, double init_method_std) {
  const uint32_t layers = plx_layer_residual_layers(&args);
  if (layers < 1)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "the create args give no residual layers (residual_layers and num_layers are 0): the output "
                "projections' initialization is scaled by them");
  return init_method_std / std::sqrt(static_cast<double>(layers));
}

NormSpec NormSpec::read(const plexus::sdk::Host& host, plx_config model, int64_t hidden) {
  NormSpec n;
  const std::string kind = host.config_string(model, "normalization");
  if (kind == "RMSNorm") {
    n.rms = true;
  } else if (kind == "LayerNorm") {
    n.rms = false;
  } else {
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "model normalization must be \"RMSNorm\" or \"LayerNorm\", got \"" + kind + "\"");
  }
  n.eps = host.config_number(model, "layernorm_epsilon");
  if (!(n.eps >= 0) || !std::isfinite(n.eps))
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "model layernorm_epsilon must be >= 0, got " + std::to_string(n.eps));
  n.cols = hidden;
  return n;
}

template <class T>
void NormSpec::forward(int64_t rows, const T* x, const T* w, const T* b, T* y, T* xhat, T* rstd) const {
  if (rms)
    k::rmsnorm_forward<T>(rows, cols, x, w, static_cast<T>(eps), y, xhat, rstd);
  else
    k::layernorm_forward<T>(rows, cols, x, w, b, static_cast<T>(eps), y, xhat, rstd);
}

template <class T>
void NormSpec::backward(int64_t rows, const T* dy, const T* xhat, const T* rstd, const T* w, T* dx, T* dw,
                        T* db) const {
  if (rms)
    k::rmsnorm_backward<T>(rows, cols, dy, xhat, rstd, w, dx, dw);
  else
    k::layernorm_backward<T>(rows, cols, dy, xhat, rstd, w, dx, dw, db);
}

template <class T>
void NormSpec::apply(int64_t rows, const T* xhat, const T* w, const T* b, T* y) const {
  k::norm_apply<T>(rows, cols, xhat, w, rms ? nullptr : b, y);
}

template void NormSpec::forward<float>(int64_t, const float*, const float*, const float*, float*, float*,
                                       float*) const;
template void NormSpec::forward<double>(int64_t, const double*, const double*, const double*, double*,
                                        double*, double*) const;
template void NormSpec::backward<float>(int64_t, const float*, const float*, const float*, const float*,
                                        float*, float*, float*) const;
template void NormSpec::backward<double>(int64_t, const double*, const double*, const double*, const double*,
                                         double*, double*, double*) const;
template void NormSpec::apply<float>(int64_t, const float*, const float*, const float*, float*) const;
template void NormSpec::apply<double>(int64_t, const double*, const double*, const double*, double*) const;

Precision precision_of(DLDataType dtype, const std::string& what) {
  if (plx_dtype_equal(dtype, plx_dtype_f32())) return Precision::f32;
  if (plx_dtype_equal(dtype, plx_dtype_f64())) return Precision::f64;
  throw Error(PLX_ERR_INVALID_ARGUMENT,
              what + ": expected dtype float32 or float64, got " + plexus::sdk::dtype_name(dtype));
}

void expect_hidden(const DLTensor& t, DLDevice device, DLDataType dtype, int64_t hidden,
                   const std::string& what, int64_t& batch, int64_t& seq) {
  sdk::expect_dense(t, device, dtype, what);
  if (t.ndim != 3 || t.shape[2] != hidden)
    throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected shape [batch, seq, " + std::to_string(hidden) +
                                              "] (hidden_size " + std::to_string(hidden) + "), got " +
                                              shape_text(t));
  batch = t.shape[0];
  seq = t.shape[1];
}

void expect_params(const std::vector<plx_param_spec>& specs, const DLTensor* params, const DLTensor* grads,
                   DLDataType dtype, DLDevice device) {
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const plx_param_spec& spec = specs[i];
    const int64_t* dims = spec.desc.dims;
    const auto ndim = static_cast<int64_t>(spec.desc.ndim);
    const std::string name = std::string("parameter ") + spec.name;
    if (params[i].data != nullptr && !plx_dtype_equal(params[i].dtype, dtype))
      throw Error(PLX_ERR_INVALID_ARGUMENT, name + ": dtype " + plexus::sdk::dtype_name(params[i].dtype) +
                                                " does not match the activations' " +
                                                plexus::sdk::dtype_name(dtype));
    expect_tensor(params[i], device, dtype, dims, ndim, name);
    if (grads != nullptr && grads[i].data != nullptr)
      expect_tensor(grads[i], device, dtype, dims, ndim, "gradient of " + name);
  }
}

namespace {
// "<kind> 12 at [0, 3] is out of range for vocab_size 11 (<valid>)"
[[noreturn]] void throw_invalid_id(const char* kind, int32_t id, int64_t index, int64_t seq, int64_t vocab,
                                   const std::string& valid) {
  throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kind) + " " + std::to_string(id) + " at [" +
                                            std::to_string(index / seq) + ", " + std::to_string(index % seq) +
                                            "] is out of range for vocab_size " + std::to_string(vocab) +
                                            " (" + valid + ")");
}
}  // namespace

void throw_invalid_token(int32_t id, int64_t index, int64_t seq, int64_t vocab) {
  throw_invalid_id("token id", id, index, seq, vocab, "valid ids: 0.." + std::to_string(vocab - 1));
}

void throw_invalid_target(int32_t target, int64_t index, int64_t seq, int64_t vocab) {
  throw_invalid_id("target", target, index, seq, vocab,
                   "valid: 0.." + std::to_string(vocab - 1) + ", or -1 to ignore");
}

void expect_hidden_desc(const plx_tensor_desc& d, int64_t hidden, const std::string& what) {
  // A description has no device, so bfloat16 (which the CUDA path runs) passes here; the CPU's
  // forward refuses it, naming the tensor.
  if (!plx_dtype_equal(d.dtype, plx_dtype_bf16())) precision_of(d.dtype, what);
  if (d.ndim != 3 || d.dims[2] != hidden)
    throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected shape [batch, seq, " + std::to_string(hidden) +
                                              "], got " + shape_text(d.dims, d.ndim));
}

TransformerLayer::TransformerLayer(const char* component, const plx_layer_create_args& args)
    : component_(component),
      device_(args.device),
      tp_(plexus::sdk::Group::find(plexus::sdk::Host::current(), "tp")),
      sp_(tp_.size() > 1 && plexus::sdk::Host::current()
                                .config_bool_if(args.model_config, "sequence_parallel")
                                .value_or(false)) {
  if (device_.device_type == kDLCPU) return;
  if (device_.device_type == kDLCUDA) {
    // The layer itself builds its CUDA implementation once its configuration is read.
    if (!cuda_built())
      throw Error(PLX_ERR_UNSUPPORTED, std::string(component) +
                                           " runs on the CPU only: this plugin was built without CUDA (" +
                                           device_text(device_) + " requested)");
    return;
  }
  throw Error(PLX_ERR_UNSUPPORTED, std::string(component) +
                                       (cuda_built() ? " runs on the CPU or a CUDA GPU only (device type "
                                                     : " runs on the CPU only (device type ") +
                                       std::to_string(static_cast<int>(device_.device_type)) + " requested)");
}

void TransformerLayer::fill_spec(LayerSpec& spec) const {
  spec.component = component_;
  spec.device = device_;
  spec.params = params_;
}

plx_param_spec TransformerLayer::param(uint32_t index) const {
  if (index >= params_.size())
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(component_) + " has " + std::to_string(params_.size()) +
                                              " parameters; there is no parameter " + std::to_string(index));
  return params_[index];
}

plx_stage_info TransformerLayer::stage(uint32_t index) const {
  if (index != 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string(component_) + " has one stage; no stage " + std::to_string(index));
  plx_stage_info s{};
  s.struct_size = sizeof(s);
  s.kind = PLX_STAGE_COMPUTE;
  s.name = component_;
  return s;
}

void TransformerLayer::expect_descs(const char* what, uint32_t num_inputs, uint32_t num_outputs) const {
  const plx_layer_info i = info();
  if (num_inputs != i.num_inputs || num_outputs != i.num_outputs)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string(what) + ": " + component_ + " takes " + std::to_string(i.num_inputs) +
                    " input(s) and " + std::to_string(i.num_outputs) + " output(s), got " +
                    std::to_string(num_inputs) + " and " + std::to_string(num_outputs));
}

void TransformerLayer::expect_call(const char* what, uint32_t stage, uint32_t num_inputs,
                                   uint32_t num_outputs, uint32_t num_params) const {
  if (stage != 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string(component_) + " has one stage; no stage " + std::to_string(stage));
  expect_descs(what, num_inputs, num_outputs);
  if (num_params != params_.size())
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(what) + ": " + component_ + " has " +
                                              std::to_string(params_.size()) + " parameters, got " +
                                              std::to_string(num_params));
}

void TransformerLayer::expect_params(const DLTensor* params, const DLTensor* grads, DLDataType dtype) const {
  transformer::expect_params(params_, params, grads, dtype, device_);
}

void TransformerLayer::refuse_split_on_device() const {
  if (on_cuda() && tp_.size() > 1)
    throw Error(PLX_ERR_UNSUPPORTED, std::string(component_) + " on " + device_text(device_) +
                                         ": tensor parallelism (a tp group of " + std::to_string(tp_.size()) +
                                         " ranks) runs on the CPU only; the CUDA layers are whole-layer "
                                         "(set distributed.topology.options.tp to 1)");
}

void TransformerLayer::refuse_estimate_on_device() const {
  if (on_cuda())
    throw Error(PLX_ERR_UNSUPPORTED, std::string(component_) + ": no activation estimate for the CUDA path");
}

int64_t padded_vocab_size(const plexus::sdk::Host& host, plx_config model) {
  const int64_t vocab = positive_int(host, model, "vocab_size");
  const int64_t padded = host.config_int_if(model, "padded_vocab_size").value_or(vocab);
  if (padded < vocab)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "model.padded_vocab_size (" + std::to_string(padded) +
                                              ") is below model.vocab_size (" + std::to_string(vocab) + ")");
  return padded;
}

int64_t split_over(const plexus::sdk::Group& tp, int64_t whole, const char* key) {
  if (whole % tp.size() != 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string("model.") + key + " (" + std::to_string(whole) +
                                              ") is not divisible by the " + std::to_string(tp.size()) +
                                              " ranks of the tp group (distributed.topology.options.tp)");
  return whole / tp.size();
}

void mark_split(plx_param_spec& spec, int32_t dim, const std::vector<int64_t>& parts) {
  spec.flags |= PLX_PARAM_TENSOR_PARALLEL;
  spec.tp_dim = dim;
  spec.tp_num_parts = static_cast<uint32_t>(parts.size());
  spec.tp_part_sizes = parts.empty() ? nullptr : parts.data();
}

plx_param_spec make_param(const char* name, std::initializer_list<int64_t> dims, uint32_t init,
                          double std_dev, uint32_t flags) {
  plx_param_spec p{};
  p.struct_size = sizeof(p);
  p.flags = flags;
  p.name = name;
  p.desc.dtype = plx_dtype_f32();
  for (int64_t d : dims) p.desc.dims[p.desc.ndim++] = d;
  p.init = init;
  p.init_a = std_dev;
  return p;
}

void expect_saved(bool saved, Precision saved_precision, Precision precision, int64_t saved_batch,
                  int64_t saved_seq, int64_t batch, int64_t seq) {
  if (!saved)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "backward without a training forward of this microbatch (PLX_FORWARD_TRAINING was not set)");
  if (saved_precision != precision)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string("backward in ") + (precision == Precision::f32 ? "float32" : "float64") +
                    " after a forward in " + (saved_precision == Precision::f32 ? "float32" : "float64"));
  if (saved_batch != batch || saved_seq != seq)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "backward of shape [" + std::to_string(batch) + ", " +
                                              std::to_string(seq) + "] after a forward of [" +
                                              std::to_string(saved_batch) + ", " + std::to_string(saved_seq) +
                                              "]");
}

}  // namespace plexus::transformer
