#include "mixer_layer.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "checks.hpp"
#include "config.hpp"
#include "context_parallel.hpp"
#include "device_impl.hpp"
#include "mixer.hpp"
#include "params.hpp"
#include "plexus/cpp/group.hpp"
#include "plexus/cpp/host.hpp"
#include "plexus/cpp/layer.hpp"
#include "plexus/cpp/tensor.hpp"
#include "plexus_kernels/buffer.hpp"

namespace plexus::mamba {
namespace {

using plexus::sdk::Error;

// The layer runs on the CPU, and on CUDA GPUs where the plugin was built with CUDA.
void expect_supported_device(DLDevice device) {
  if (device.device_type == kDLCPU) return;
  if (device.device_type == kDLCUDA) {
    if (!cuda_built())
      throw Error(PLX_ERR_UNSUPPORTED, std::string(kComponent) +
                                           " runs on the CPU only: this plugin was built without CUDA (" +
                                           plexus::sdk::device_text(device) + " requested)");
    return;
  }
  throw Error(PLX_ERR_UNSUPPORTED, std::string(kComponent) +
                                       (cuda_built() ? " runs on the CPU or a CUDA GPU only (device type "
                                                     : " runs on the CPU only (device type ") +
                                       std::to_string(static_cast<int>(device.device_type)) + " requested)");
}

// The device first (a device the build cannot use is refused before the options are looked at),
// then the options.
MixerConfig read_config(const plx_layer_create_args& args, const plexus::sdk::Group& tp) {
  expect_supported_device(args.device);
  if (tp.size() > 1 && args.device.device_type == kDLCUDA)
    throw Error(PLX_ERR_UNSUPPORTED, std::string(kComponent) + " on " +
                                         plexus::sdk::device_text(args.device) +
                                         ": tensor parallelism (a tp group of " + std::to_string(tp.size()) +
                                         " ranks) runs on the CPU only; the CUDA mixer is whole "
                                         "(set distributed.topology.options.tp to 1)");
  MixerConfig c = MixerConfig::read(plexus::sdk::Host::current(), args.config, args.model_config);
  if (tp.size() > 1) c.split_over(tp.size());
  return c;
}

// The layers that add to the residual stream, which scale out_proj's initialization: the create
// args' residual_layers from a 1.6 host; from an older one num_layers, which in the hybrid models
// a Mamba layer belongs to counts every physical layer (Megatron's hybrid rule).
uint32_t checked_layers(const plx_layer_create_args& args) {
  const uint32_t num_layers =
      PLX_HAS_FIELD(&args, plx_layer_create_args, residual_layers) && args.residual_layers > 0
          ? args.residual_layers
          : args.num_layers;
  if (num_layers < 1)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string(kComponent) +
                    ": num_layers in the create args must be at least 1 (it scales out_proj's "
                    "initialization), got 0");
  return num_layers;
}

// Context parallelism (context_parallel.hpp) runs on the CPU: refused by name otherwise. The
// config each rank computes with: its 1/cp of its tp share of the heads.
MixerConfig context_parallel_config(const plx_layer_create_args& args, const plexus::sdk::Group& cp,
                                    const MixerConfig& tp_share) {
  if (cp.size() <= 1) return tp_share;
  if (args.device.device_type != kDLCPU)
    throw Error(PLX_ERR_UNSUPPORTED,
                std::string(kComponent) + " under context parallelism (a cp group of " +
                    std::to_string(cp.size()) +
                    " ranks) runs on the CPU only; the CUDA mixer is whole (set cp to 1)");
  return tp_share.split_over_cp(cp.size());
}

// The group whose ranks hold the other heads of the same tokens under context parallelism, over
// which the pre-norm output's gradient is summed: cp, or tp x cp beside tensor parallelism.
plexus::sdk::Group heads_group(const plexus::sdk::Group& tp, const plexus::sdk::Group& cp) {
  if (cp.size() <= 1 || tp.size() <= 1) return cp;
  return plexus::sdk::Group::find(plexus::sdk::Host::current(), "tp_cp");
}

class Mixer final : public plexus::sdk::Layer {
 public:
  explicit Mixer(const plx_layer_create_args& args)
      : tp_(plexus::sdk::Group::find(plexus::sdk::Host::current(), "tp")),
        sp_(tp_.size() > 1 && plexus::sdk::Host::current()
                                  .config_bool_if(args.model_config, "sequence_parallel")
                                  .value_or(false)),
        config_(read_config(args, tp_)),
        params_(declare_params(config_, checked_layers(args))),
        cp_(plexus::sdk::Group::find(plexus::sdk::Host::current(), "cp")),
        cp_config_(context_parallel_config(args, cp_, config_)),
        cp_params_(declare_params(cp_config_, checked_layers(args))),
        heads_group_(heads_group(tp_, cp_)),
        device_(args.device),
        device_impl_(device_.device_type == kDLCUDA ? make_cuda_mixer(config_, device_) : nullptr) {}

  plx_layer_info info() const override {
    plx_layer_info i{};
    i.struct_size = sizeof(i);
    i.flags = PLX_LAYER_CONTEXT_PARALLEL;  // head-parallel over cp (context_parallel.hpp)
    i.num_params = static_cast<uint32_t>(params_.specs.size());
    i.num_stages = 1;
    i.num_inputs = 1;
    i.num_outputs = 1;
    return i;
  }

  plx_param_spec param(uint32_t index) const override {
    if (index >= params_.specs.size())
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  std::string(kComponent) + " has " + std::to_string(params_.specs.size()) +
                      " parameters; there is no parameter " + std::to_string(index));
    return params_.specs[index];
  }

  plx_stage_info stage(uint32_t index) const override {
    expect_stage(index);
    plx_stage_info s{};
    s.struct_size = sizeof(s);
    s.kind = PLX_STAGE_COMPUTE;
    s.name = kComponent;
    return s;
  }

  void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs, uint32_t num_outputs,
                   plx_tensor_desc* outputs) const override {
    expect_counts("output_desc", num_inputs, num_outputs);
    expect_hidden_desc(inputs[0], device_, config_.d_model, "input 0 (hidden states)");
    outputs[0] = inputs[0];
  }

  void init_param(uint32_t index, DLTensor& value, uint64_t seed) override {
    if (!device_impl_ || value.device.device_type == kDLCPU) {
      init_custom_param(config_, params_, index, value, seed);
      return;
    }
    // A parameter on the layer's GPU: drawn into a host copy (the same numbers as on the CPU),
    // then copied to the device.
    const plx_param_spec p = param(index);
    expect_tensor(value, device_, plx_dtype_f32(), p.desc.dims, p.desc.ndim,
                  std::string("parameter ") + p.name);
    std::vector<float> host(static_cast<std::size_t>(plx_numel(&value)));
    DLTensor on_host = value;
    on_host.data = host.data();
    on_host.device = DLDevice{kDLCPU, 0};
    on_host.byte_offset = 0;
    init_custom_param(config_, params_, index, on_host, seed);
    device_impl_->upload(host.data(), host.size() * sizeof(float), plx_data(&value));
  }

  std::unique_ptr<plexus::sdk::LayerState> create_state(uint32_t /*microbatch*/) override {
    if (device_impl_) return device_impl_->create_state();
    return std::make_unique<MixerState>();
  }

  void forward(plexus::sdk::LayerState& state, uint32_t stage, const plx_forward_args& args) override {
    expect_call("forward", stage, args.num_inputs, args.num_outputs, args.num_params);
    auto& st = static_cast<MixerStateBase&>(state);
    if (precision_on(device_, args.inputs[0].dtype, "input 0 (hidden states)") == Precision::f32)
      run_forward<float>(st, args);
    else
      run_forward<double>(st, args);
  }

  void backward(plexus::sdk::LayerState& state, uint32_t stage, const plx_backward_args& args) override {
    expect_call("backward", stage, args.num_inputs, args.num_outputs, args.num_params);
    auto& st = static_cast<MixerStateBase&>(state);
    if (precision_on(device_, args.grad_outputs[0].dtype, "grad output 0") == Precision::f32)
      run_backward<float>(st, args);
    else
      run_backward<double>(st, args);
  }

  // ABI 1.10: what a training forward keeps (mixer_saved_elements) for the tokens it runs on:
  // under sequence parallelism every tp rank's block, under context parallelism the whole
  // sequence with this rank's 1/cp of the heads.
  double estimate_activation_bytes(uint32_t num_inputs, const plx_tensor_desc* inputs,
                                   const plx_activation_query& query) const override {
    expect_counts("estimate_activation_bytes", num_inputs, 1);
    expect_hidden_desc(inputs[0], device_, config_.d_model, "input 0 (hidden states)");
    if (device_impl_)
      throw Error(PLX_ERR_UNSUPPORTED, std::string(kComponent) + ": no activation estimate on CUDA");
    const int64_t cp = query.cp_size;
    const MixerConfig heads = cp > 1 ? config_.split_over_cp(cp) : config_;
    const int64_t seq = inputs[0].dims[1] * (sp_ ? tp_.size() : 1) * cp;
    const double element = static_cast<double>(inputs[0].dtype.bits) / 8.0;
    return element * static_cast<double>(mixer_saved_elements(heads, inputs[0].dims[0], seq));
  }

  // The matrix products as run, 2 FLOPs per multiply-add (mixer_flops).
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_counts("estimate_flops", num_inputs, 1);
    expect_hidden_desc(inputs[0], device_, config_.d_model, "input 0 (hidden states)");
    // Under sequence parallelism the mixer runs on every rank's block of the tokens.
    const MixerFlops f = mixer_flops(config_, inputs[0].dims[0], inputs[0].dims[1] * (sp_ ? tp_.size() : 1));
    forward = f.forward;
    backward = f.backward;
  }

 private:
  static void expect_stage(uint32_t stage) {
    if (stage != 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  std::string(kComponent) + " has one stage; no stage " + std::to_string(stage));
  }
  static void expect_counts(const char* what, uint32_t num_inputs, uint32_t num_outputs) {
    if (num_inputs != 1 || num_outputs != 1)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  std::string(what) + ": " + kComponent + " takes 1 input and 1 output, got " +
                      std::to_string(num_inputs) + " and " + std::to_string(num_outputs));
  }
  void expect_call(const char* what, uint32_t stage, uint32_t num_inputs, uint32_t num_outputs,
                   uint32_t num_params) const {
    expect_stage(stage);
    expect_counts(what, num_inputs, num_outputs);
    if (num_params != params_.specs.size())
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(what) + ": " + kComponent + " has " +
                                                std::to_string(params_.specs.size()) + " parameters, got " +
                                                std::to_string(num_params));
  }
  // Every parameter (and every wanted gradient) in the activations' dtype with its spec's shape,
  // on the layer's device.
  void expect_params(const DLTensor* params, const DLTensor* grads, DLDataType dtype) const {
    for (std::size_t i = 0; i < params_.specs.size(); ++i) {
      const plx_param_spec& p = params_.specs[i];
      const std::string name = std::string("parameter ") + p.name;
      if (params[i].data != nullptr && !plx_dtype_equal(params[i].dtype, dtype))
        throw Error(PLX_ERR_INVALID_ARGUMENT, name + ": dtype " + plexus::sdk::dtype_name(params[i].dtype) +
                                                  " does not match the activations' " +
                                                  plexus::sdk::dtype_name(dtype));
      expect_tensor(params[i], device_, dtype, p.desc.dims, p.desc.ndim, name);
      if (grads != nullptr && grads[i].data != nullptr)
        expect_tensor(grads[i], device_, dtype, p.desc.dims, p.desc.ndim, "gradient of " + name);
    }
  }

  template <class T>
  MixerWeights<T> weights(const DLTensor* p) const {
    const ParamIndex& ix = params_.index;
    MixerWeights<T> w;
    w.norm_weight = data<T>(p[ix.norm_weight]);
    if (ix.norm_bias != ParamIndex::kAbsent) w.norm_bias = data<T>(p[ix.norm_bias]);
    w.in_proj = data<T>(p[ix.in_proj]);
    w.conv_weight = data<T>(p[ix.conv_weight]);
    w.conv_bias = data<T>(p[ix.conv_bias]);
    w.dt_bias = data<T>(p[ix.dt_bias]);
    w.a_log = data<T>(p[ix.a_log]);
    w.d = data<T>(p[ix.d]);
    w.gated_norm_weight = data<T>(p[ix.gated_norm_weight]);
    w.out_proj = data<T>(p[ix.out_proj]);
    return w;
  }

  template <class T>
  MixerGrads<T> gradients(const DLTensor* g) const {
    const ParamIndex& ix = params_.index;
    const auto at = [&](uint32_t i) -> T* {
      return i != ParamIndex::kAbsent && g != nullptr && g[i].data != nullptr ? data<T>(g[i]) : nullptr;
    };
    MixerGrads<T> out;
    out.norm_weight = at(ix.norm_weight);
    out.norm_bias = at(ix.norm_bias);
    out.in_proj = at(ix.in_proj);
    out.conv_weight = at(ix.conv_weight);
    out.conv_bias = at(ix.conv_bias);
    out.dt_bias = at(ix.dt_bias);
    out.a_log = at(ix.a_log);
    out.d = at(ix.d);
    out.gated_norm_weight = at(ix.gated_norm_weight);
    out.out_proj = at(ix.out_proj);
    return out;
  }

  // The checks of both devices, then the CPU path or the device's (float32 only there:
  // precision_on refused anything else).
  template <class T>
  void run_forward(MixerStateBase& st, const plx_forward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.inputs[0], device_, dt, config_.d_model, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], device_, dt, {batch, seq, config_.d_model}, "output 0");
    expect_params(args.params, nullptr, dt);
    const bool train = (args.flags & PLX_FORWARD_TRAINING) != 0;
    st.saved = false;  // a failed or inference forward leaves nothing a backward could use
    if constexpr (std::is_same_v<T, float>) {
      if (device_impl_) {
        device_impl_->forward(st, weights<T>(args.params), batch, seq, data<T>(args.inputs[0]),
                              data<T>(args.outputs[0]), train, args.compute_stream);
        return;
      }
    }
    if (cp_.size() > 1) return cp_forward<T>(st, args, batch, seq, train);
    if (!sp_) {
      mixer_forward<T>(config_, weights<T>(args.params), batch, seq, data<T>(args.inputs[0]),
                       data<T>(args.outputs[0]), train ? &static_cast<MixerState&>(st) : nullptr);
      tp_.all_reduce(args.outputs[0]);  // out_proj is row-parallel: the ranks' partial sums
      return;
    }
    // Sequence parallelism: the convolution and the scan need whole sequences, so every rank's
    // block of the tokens is gathered, the mixer (its pre-norm included) runs on all of them, and
    // the output's partial sums are reduce-scattered back to each rank's block.
    const int64_t rows = batch * seq, dm = config_.d_model;
    plexus::kernels::Buffer x_all, out_all;
    T* x = x_all.get<T>(static_cast<std::size_t>(rows * tp_.size() * dm));
    T* out = out_all.get<T>(static_cast<std::size_t>(rows * tp_.size() * dm));
    tp_.gather_rows(data<T>(args.inputs[0]), x, rows, dm, dtype_of(precision_v<T>), device_);
    mixer_forward<T>(config_, weights<T>(args.params), batch, seq * tp_.size(), x, out,
                     train ? &static_cast<MixerState&>(st) : nullptr);
    tp_.finish(tp_.start_scatter_sum_rows(out, data<T>(args.outputs[0]), rows, dm, dtype_of(precision_v<T>),
                                          device_));
  }

  template <class T>
  void run_backward(MixerStateBase& st, const plx_backward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.grad_outputs[0], device_, dt, config_.d_model, "grad output 0", batch, seq);
    if (!st.saved)
      throw Error(
          PLX_ERR_INVALID_ARGUMENT,
          "backward without a training forward of this microbatch (PLX_FORWARD_TRAINING was not set)");
    if (st.precision != precision_v<T>)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string("backward in ") + plexus::sdk::dtype_name(dt) +
                                                " after a forward in " +
                                                plexus::sdk::dtype_name(dtype_of(st.precision)));
    if (st.batch != batch || st.seq != seq * (sp_ ? tp_.size() : 1) * cp_.size())
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string("backward of shape [") + std::to_string(batch) +
                                                ", " + std::to_string(seq) + "] after a forward of [" +
                                                std::to_string(st.batch) + ", " + std::to_string(st.seq) +
                                                "]");
    T* dh = nullptr;
    if (args.grad_inputs[0].data != nullptr) {
      expect_tensor(args.grad_inputs[0], device_, dt, {batch, seq, config_.d_model}, "grad input 0");
      dh = data<T>(args.grad_inputs[0]);
    }
    expect_params(args.params, args.param_grads, dt);
    if constexpr (std::is_same_v<T, float>) {
      if (device_impl_) {
        device_impl_->backward(st, weights<T>(args.params), gradients<T>(args.param_grads),
                               data<T>(args.grad_outputs[0]), dh, args.compute_stream);
        return;
      }
    }
    if (cp_.size() > 1) return cp_backward<T>(st, args, batch, seq, dh);
    if (!sp_) {
      mixer_backward<T>(config_, weights<T>(args.params), gradients<T>(args.param_grads),
                        static_cast<const MixerState&>(st), data<T>(args.grad_outputs[0]), dh, tp_);
      return;
    }
    // Sequence parallelism: every rank's block of the output gradient, gathered; the mixer's
    // input gradient comes out whole on every rank (its pre-norm ran on every token, after the
    // norm output's gradient was summed over tp), of which this rank keeps its block.
    const int64_t rows = batch * seq, dm = config_.d_model;
    plexus::kernels::Buffer dy_all, dh_all;
    T* dy = dy_all.get<T>(static_cast<std::size_t>(rows * tp_.size() * dm));
    tp_.gather_rows(data<T>(args.grad_outputs[0]), dy, rows, dm, dtype_of(precision_v<T>), device_);
    T* dx = dh != nullptr ? dh_all.get<T>(static_cast<std::size_t>(rows * tp_.size() * dm)) : nullptr;
    mixer_backward<T>(config_, weights<T>(args.params), gradients<T>(args.param_grads),
                      static_cast<const MixerState&>(st), dy, dx, tp_);
    if (dx != nullptr) std::copy(dx + tp_.rank() * rows * dm, dx + (tp_.rank() + 1) * rows * dm, dh);
  }

  // Context parallelism: every rank's chunks gathered and put in sequence order, the mixer run on
  // this rank's heads (its slices of the whole parameters, or of its tp share), out_proj's partial
  // sums put back in the ranks' order and reduce-scattered to each rank's chunks, then summed over
  // tp (reduce-scattered to this rank's block under sequence parallelism).
  template <class T>
  void cp_forward(MixerStateBase& st, const plx_forward_args& args, int64_t batch, int64_t seq, bool train) {
    const DLDataType dt = dtype_of(precision_v<T>);
    const int64_t block = batch * seq, dm = config_.d_model;
    const int64_t seq_chunks = seq * (sp_ ? tp_.size() : 1);  // this cp rank's tokens per sequence
    const int64_t rows = batch * seq_chunks;
    const int32_t n = cp_.size();
    const auto all = static_cast<std::size_t>(rows * n * dm);
    std::vector<plexus::kernels::Buffer> slices(cp_params_.specs.size());
    const std::vector<DLTensor> views = cp_slices<T>(args.params, slices, false);
    plexus::kernels::Buffer chunks_buf, gathered, x_buf, out_buf, partial_buf;
    const T* chunks = data<T>(args.inputs[0]);
    if (sp_) {
      T* whole_chunks = chunks_buf.get<T>(static_cast<std::size_t>(rows * dm));
      tp_.gather_rows(chunks, whole_chunks, block, dm, dt, device_);
      chunks = whole_chunks;
    }
    T* by_rank = gathered.get<T>(all);
    cp_.gather_rows(chunks, by_rank, rows, dm, dt, device_);
    T* x = x_buf.get<T>(all);
    cp_rows_to_sequence<T>(by_rank, x, batch, seq_chunks, dm, n);
    T* out = out_buf.get<T>(all);
    mixer_forward<T>(cp_config_, weights<T>(views.data()), batch, seq_chunks * n, x, out,
                     train ? &static_cast<MixerState&>(st) : nullptr);
    cp_rows_to_rank_major<T>(out, by_rank, batch, seq_chunks, dm, n);
    T* output = data<T>(args.outputs[0]);
    T* partial = sp_ ? partial_buf.get<T>(static_cast<std::size_t>(rows * dm)) : output;
    cp_.finish(cp_.start_scatter_sum_rows(by_rank, partial, rows, dm, dt, device_));
    if (sp_)
      tp_.finish(tp_.start_scatter_sum_rows(partial, output, block, dm, dt, device_));
    else
      tp_.all_reduce(args.outputs[0]);
  }

  // The backward: every rank's output gradient gathered in sequence order, the mixer's backward on
  // this rank's heads (the pre-norm's input gradient summed over the ranks holding the other heads,
  // cp or tp x cp), this rank's chunks (its block of them under sequence parallelism) of the input
  // gradient, and the slices' gradients added into the whole ones (a whole parameter's / cp).
  template <class T>
  void cp_backward(MixerStateBase& st, const plx_backward_args& args, int64_t batch, int64_t seq, T* dh) {
    const DLDataType dt = dtype_of(precision_v<T>);
    const int64_t block = batch * seq, dm = config_.d_model;
    const int64_t seq_chunks = seq * (sp_ ? tp_.size() : 1);
    const int64_t rows = batch * seq_chunks;
    const int32_t n = cp_.size();
    const auto all = static_cast<std::size_t>(rows * n * dm);
    std::vector<plexus::kernels::Buffer> slices(cp_params_.specs.size()), grad_slices(slices.size());
    const std::vector<DLTensor> views = cp_slices<T>(args.params, slices, false);
    const std::vector<DLTensor> grads = cp_slices<T>(args.params, grad_slices, true);
    plexus::kernels::Buffer chunks_buf, gathered, dy_buf, dx_buf;
    const T* dy_chunks = data<T>(args.grad_outputs[0]);
    if (sp_) {
      T* whole_chunks = chunks_buf.get<T>(static_cast<std::size_t>(rows * dm));
      tp_.gather_rows(dy_chunks, whole_chunks, block, dm, dt, device_);
      dy_chunks = whole_chunks;
    }
    T* by_rank = gathered.get<T>(all);
    cp_.gather_rows(dy_chunks, by_rank, rows, dm, dt, device_);
    T* dy = dy_buf.get<T>(all);
    cp_rows_to_sequence<T>(by_rank, dy, batch, seq_chunks, dm, n);
    T* dx = dh != nullptr ? dx_buf.get<T>(all) : nullptr;
    mixer_backward<T>(cp_config_, weights<T>(views.data()), gradients<T>(grads.data()),
                      static_cast<const MixerState&>(st), dy, dx, heads_group_);
    if (dx != nullptr) {
      // Whole on every rank: this cp rank's chunks, and of them this tp rank's block under SP.
      cp_rows_to_rank_major<T>(dx, by_rank, batch, seq_chunks, dm, n);
      const int64_t first = cp_.rank() * rows + (sp_ ? tp_.rank() * block : 0);
      std::copy_n(by_rank + first * dm, block * dm, dh);
    }
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (args.param_grads[i].data == nullptr) continue;
      const plx_param_spec& slice = cp_params_.specs[i];
      const T scale = (slice.flags & PLX_PARAM_TENSOR_PARALLEL) != 0 ? T(1) : T(1) / static_cast<T>(n);
      cp_add_slice<T>(slice, data<T>(grads[i]), cp_.rank(), n, scale, data<T>(args.param_grads[i]));
    }
  }

  // This rank's slices of the whole parameters (zeros: zeroed buffers of their shapes, for the
  // gradients), as tensors in the parameters' order.
  template <class T>
  std::vector<DLTensor> cp_slices(const DLTensor* whole, std::vector<plexus::kernels::Buffer>& buffers,
                                  bool zeros) const {
    std::vector<DLTensor> views(cp_params_.specs.size());
    for (std::size_t i = 0; i < views.size(); ++i) {
      const plx_param_spec& slice = cp_params_.specs[i];
      std::size_t count = 1;
      for (uint32_t d = 0; d < slice.desc.ndim; ++d) count *= static_cast<std::size_t>(slice.desc.dims[d]);
      T* values = zeros ? buffers[i].zeros<T>(count) : buffers[i].get<T>(count);
      if (!zeros) cp_take_slice<T>(slice, data<T>(whole[i]), cp_.rank(), cp_.size(), values);
      views[i] = DLTensor{values,
                          device_,
                          static_cast<int32_t>(slice.desc.ndim),
                          dtype_of(precision_v<T>),
                          const_cast<int64_t*>(slice.desc.dims),
                          nullptr,
                          0};
    }
    return views;
  }

  plexus::sdk::Group tp_;  // the host's "tp" group (one rank without tensor parallelism)
  // Sequence parallelism (model_config.sequence_parallel, set by the host with a tp group only):
  // the hidden states in and out are this rank's block of the microbatch's tokens.
  bool sp_ = false;
  MixerConfig config_;
  ParamList params_;
  // Context parallelism: the host's "cp" group, the config of this rank's heads and its
  // parameters' slices (the whole config and parameters without cp).
  plexus::sdk::Group cp_;
  MixerConfig cp_config_;
  ParamList cp_params_;
  plexus::sdk::Group heads_group_;  // cp, or tp x cp beside tensor parallelism
  DLDevice device_;
  // Set when the layer was created on a CUDA device: it then computes every forward and backward
  // and owns the states; null on the CPU.
  std::unique_ptr<MixerDevice> device_impl_;
};

}  // namespace

const plx_component_desc* mixer_component() {
  static const plx_component_desc desc =
      plexus::sdk::layer_component<Mixer>(kComponent,
                                          "the Mamba-2 layer (Megatron-LM's MambaLayer), F only: "
                                          "out_proj(gated grouped RMSNorm(SSD(conv(in_proj(norm(x))))))",
                                          options_schema());
  return &desc;
}

}  // namespace plexus::mamba
