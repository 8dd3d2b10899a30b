// moe.layer, F only: f = unpermute(experts(permute(norm(x))), router probabilities) (+ the shared
// experts' output). With every expert on this rank (ep = 1), three compute stages, forward in
// order and backward in reverse:
//   "route"      pre_mlp_layernorm, router (logits, top-k, probabilities, aux losses), the
//                capacity's drops, permute
//   "experts"    the grouped expert MLPs over the permuted rows, and the shared experts
//   "unpermute"  each token's k expert outputs weighted by its probabilities and summed
// With an "ep" group of more than one rank, two communication stages go between them:
//   "dispatch"   forward: exchanges the rows per expert (blocking, ep x E/ep integers), then
//                STARTS the all-to-all of the permuted rows to their experts' ranks;
//                backward: starts the all-to-all of the experts' input gradients back
//   "combine"    forward: starts the all-to-all of the experts' outputs back to the rows' ranks;
//                backward: starts the all-to-all of the output gradients to the experts' ranks
// and the next compute stage of the same microbatch waits for what the comm stage started, so
// a scheduler can run another microbatch's compute in between (the comm backend progresses the
// transfer on its own). Everything a later stage needs lives in the per-microbatch state.
//
// On a CUDA device (float32, ep = 1) the same three stages run through the MoeDevice of src/cuda/
// (device_impl.hpp); this file still makes every check.
#include "moe_layer.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "capacity.hpp"
#include "checks.hpp"
#include "config.hpp"
#include "device_impl.hpp"
#include "expert_exchange.hpp"
#include "expert_load.hpp"
#include "expert_tensor_parallel.hpp"
#include "experts.hpp"
#include "permutation.hpp"
#include "plexus/cpp/group.hpp"
#include "plexus/cpp/host.hpp"
#include "plexus/cpp/layer.hpp"
#include "plexus/cpp/tensor.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/gemm.hpp"
#include "plexus_kernels/norm.hpp"
#include "router.hpp"

namespace plexus::moe {
namespace {

using plexus::sdk::Error;
namespace k = plexus::kernels;

// The steps of the layer; a rank without expert parallelism has no dispatch and combine stages.
enum Step : uint32_t { kRoute, kDispatch, kExperts, kCombine, kUnpermute };
constexpr const char* kStepNames[] = {"route", "dispatch", "experts", "combine", "unpermute"};

std::size_t sz(int64_t v) {
  return static_cast<std::size_t>(v);
}
// Room for n elements, never a null pointer (an empty side of an all-to-all still passes one).
std::size_t at_least_one(int64_t n) {
  return n > 0 ? sz(n) : 1;
}

class MoeState : public plexus::sdk::LayerState {
 public:
  explicit MoeState(uint32_t stages) : next_backward(stages - 1) {}
  MoeState(const MoeState&) = delete;
  MoeState& operator=(const MoeState&) = delete;
  // A transfer still in flight writes into this state's buffers: complete it before they go.
  ~MoeState() override {
    if (pending == nullptr) return;
    const plx_host_api* api = plexus::sdk::Host::current().api();
    api->request_wait(api->ctx, pending);
  }

  uint32_t next_forward = 0;  // the forward stage expected next
  bool saved = false;         // a complete training forward is held
  uint32_t next_backward;
  Precision precision = Precision::f32;
  int64_t batch = 0, seq = 0;
  k::Buffer xhat, rstd, u;  // the pre-norm: its normalized rows and output
  RouterSaved router;
  std::vector<uint8_t> kept;  // [T, k] under a capacity: 0 for a dropped pair
  Permutation perm;
  ExpertsSaved shared;            // the shared experts' activations
  k::Buffer shared_y, du_shared;  // their output [T, C] (before the gate); their input gradient
  // moe_shared_expert_gate: sigmoid(u . g) per token [T], and the gradient of its logit [T].
  k::Buffer gate, dgate_logit;
  k::Buffer x_perm, y_perm;
  ExpertsSaved experts;
  k::Buffer dy_perm, dprobs, dx_perm;  // between backward stages
  // Weight gradients apart (PLX_BACKWARD_SKIP_WEIGHT_GRADS): what backward_weights needs that
  // backward computed, fc1's output gradients, the shared experts' output gradient, the router's
  // logit gradient and the pre-norm's output gradient; and whether they wait for it.
  bool skip_weights = false;
  bool weights_due = false;
  k::Buffer da_experts, da_shared, dy_shared, dlogits, du;

  // Expert parallelism: who sends what where, the rows arrived from the ep ranks (source-major)
  // and regrouped by local expert (expert-major), the experts' outputs going back; backward the
  // same for the gradients. `pending` is the all-to-all a comm stage started, waited for by the
  // next compute stage.
  ExchangeLayout layout;
  k::Buffer x_recv, x_local, y_local, y_send;
  k::Buffer dy_recv, dy_local, dx_local, dx_send;
  plx_request pending = nullptr;

  // Expert tensor parallelism (expert_tensor_parallel.hpp): every expert_tp rank's rows of the
  // local experts, gathered, and their output gradients, for the weight gradients.
  EtpLayout etp;
  k::Buffer x_etp, dy_etp;

  // On a CUDA device: everything above lives there instead (the bookkeeping stays here).
  std::unique_ptr<DeviceState> device;
};

// The device first (a device the build cannot use is refused before the options are looked at),
// then the options.
MoeConfig read_config(const plx_layer_create_args& args) {
  const DLDevice device = args.device;
  if (device.device_type == kDLCUDA && !cuda_built())
    throw Error(PLX_ERR_UNSUPPORTED, std::string(kComponent) +
                                         " runs on the CPU only: this plugin was built without CUDA (" +
                                         plexus::sdk::device_text(device) + " requested)");
  if (device.device_type != kDLCPU && device.device_type != kDLCUDA)
    throw Error(PLX_ERR_UNSUPPORTED, std::string(kComponent) +
                                         (cuda_built() ? " runs on the CPU or a CUDA GPU only (device type "
                                                       : " runs on the CPU only (device type ") +
                                         std::to_string(static_cast<int>(device.device_type)) +
                                         " requested)");
  // Tensor parallelism: the layer runs on each rank's block of the tokens (sequence
  // parallelism, which Megatron requires for MoE at tp > 1), the router replicated; the experts
  // whole on every tp rank (expert_tp 1) or split over expert_tp (expert_tensor_parallel.hpp).
  const plexus::sdk::Host host = plexus::sdk::Host::current();
  const plexus::sdk::Group tp = plexus::sdk::Group::find(host, "tp");
  const plexus::sdk::Group expert_tp = plexus::sdk::Group::find(host, "expert_tp");
  const std::string at = std::string(kComponent) + " at tp " + std::to_string(tp.size()) + ": ";
  // Context parallelism runs the layer on each rank's chunks of the sequences (the router's counts
  // summed over tp x cp, as Megatron sums them); on the CPU only.
  if (const plexus::sdk::Group cp = plexus::sdk::Group::find(host, "cp");
      cp.size() > 1 && device.device_type != kDLCPU)
    throw Error(PLX_ERR_UNSUPPORTED, std::string(kComponent) +
                                         " on CUDA under context parallelism (a cp group of " +
                                         std::to_string(cp.size()) + " ranks) is not built; set cp to 1");
  if (tp.size() > 1 && !host.config_bool_if(args.model_config, "sequence_parallel").value_or(false))
    throw Error(PLX_ERR_UNSUPPORTED, at + "MoE layers under tensor parallelism need sequence parallelism, as "
                                          "Megatron-LM requires (set model.sequence_parallel to true)");
  if (tp.size() > 1 && device.device_type == kDLCUDA)
    throw Error(PLX_ERR_UNSUPPORTED, at + "tensor parallelism runs on the CPU only; the CUDA layer is whole "
                                          "(set distributed.topology.options.tp to 1)");
  if (expert_tp.size() > 1 && device.device_type == kDLCUDA)
    throw Error(PLX_ERR_UNSUPPORTED, std::string(kComponent) +
                                         ": expert tensor parallelism (an expert_tp group of " +
                                         std::to_string(expert_tp.size()) +
                                         " ranks) runs on the CPU only; the CUDA experts are whole "
                                         "(set distributed.topology.options.expert_tp to 1)");
  MoeConfig c = MoeConfig::read(plexus::sdk::Host::current(), args.config, args.model_config,
                                plx_layer_residual_layers(&args));
  if (expert_tp.size() > 1 && c.ffn % expert_tp.size() != 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string(kComponent) + ": the experts' width moe_ffn_hidden_size (" +
                    std::to_string(c.ffn) + ") is not divisible by the " + std::to_string(expert_tp.size()) +
                    " ranks of the expert_tp group (distributed.topology.options.expert_tp): each rank "
                    "holds an equal share of every expert's width");
  return c;
}

// What the CUDA path does not do yet, refused when the layer is created (before the device is
// touched), naming the option and the device.
void expect_built_on_cuda(const MoeConfig& c, const ExpertGroup& ep, DLDevice device) {
  const std::string on = std::string(kComponent) + " on CUDA (" + plexus::sdk::device_text(device) + "): ";
  if (c.shared_expert_gate)
    throw Error(PLX_ERR_UNSUPPORTED,
                on + "moe_shared_expert_gate is not built for CUDA yet (it runs on the CPU)");
  if (ep.parallel())
    throw Error(PLX_ERR_UNSUPPORTED, on + "expert parallelism is not built yet: the \"ep\" group has " +
                                         std::to_string(ep.size) +
                                         " ranks, the CUDA path needs ep = 1 (every expert on each rank)");
}

class MoeLayer final : public plexus::sdk::Layer {
 public:
  explicit MoeLayer(const plx_layer_create_args& args)
      : config_(read_config(args)),
        layer_index_(args.layer_index),
        sequence_(plexus::sdk::Group::find(plexus::sdk::Host::current(), "tp")),
        cp_size_(plexus::sdk::Group::find(plexus::sdk::Host::current(), "cp").size()),
        tokens_(plexus::sdk::Group::find(plexus::sdk::Host::current(), cp_size_ > 1 ? "tp_cp" : "tp")),
        ep_(ExpertGroup::find(*plexus::sdk::Host::current().api(), config_.experts)),
        expert_tp_(plexus::sdk::Group::find(plexus::sdk::Host::current(), "expert_tp")),
        load_(config_.experts),
        device_(args.device) {
    const MoeConfig& c = config_;
    if (device_.device_type == kDLCUDA) {
      expect_built_on_cuda(c, ep_, device_);
      device_impl_ = make_cuda_moe(c, device_);
    }
    steps_ = ep_.parallel() ? std::vector<Step>{kRoute, kDispatch, kExperts, kCombine, kUnpermute}
                            : std::vector<Step>{kRoute, kExperts, kUnpermute};
    // One spelling in both of Megatron's specs: its Transformer Engine spec fuses a dense MLP's
    // norm into linear_fc1, but keeps an MoE layer's pre_mlp_layernorm a module of its own (TENorm).
    add("pre_mlp_layernorm.weight", {c.hidden}, PLX_INIT_ONES, 0, PLX_PARAM_NO_WEIGHT_DECAY);
    if (!c.rms_prenorm)
      add("pre_mlp_layernorm.bias", {c.hidden}, PLX_INIT_ZEROS, 0, PLX_PARAM_NO_WEIGHT_DECAY);
    router_index_ = static_cast<uint32_t>(specs_.size());
    add("mlp.router.weight", {c.experts, c.hidden}, PLX_INIT_NORMAL, c.init_std, 0);
    // Megatron's name for the aux-loss-free bias: state the layer updates itself (a buffer),
    // float32 [E], zero at the start, the same on every rank.
    if (c.expert_bias) {
      bias_index_ = static_cast<uint32_t>(specs_.size());
      add("mlp.router.expert_bias", {c.experts}, PLX_INIT_ZEROS, 0,
          PLX_PARAM_BUFFER | PLX_PARAM_NO_WEIGHT_DECAY);
    }
    experts_index_ = static_cast<uint32_t>(specs_.size());
    // Megatron's SequentialMLP (the local spec) names with the global expert index i; only this
    // rank's experts exist here. Their gradients hold every ep rank's tokens, so they are averaged
    // over expert_dp (the ranks holding the same experts), not over dp.
    for (int64_t e = ep_.first_expert; e < ep_.first_expert + ep_.local_experts; ++e) {
      const std::string prefix = "mlp.experts.local_experts." + std::to_string(e) + ".";
      add(prefix + "linear_fc1.weight", {expert_shape().fc1_rows(), c.hidden}, PLX_INIT_NORMAL, c.init_std,
          0);
      add(prefix + "linear_fc2.weight", {c.hidden, expert_shape().ffn}, PLX_INIT_NORMAL, c.output_init_std,
          0);
      // Declared split over expert_tp whenever it has more than one rank, and where it is tp's
      // size (also at tp 1, a split of one rank: plexus model show --tp counts a rank's share).
      if (expert_tp_.size() > 1 || expert_tp_.size() == sequence_.size())
        split_expert(specs_.size() - 2, specs_.size() - 1);
      if (c.grouped_gemm) {
        // Megatron's TE spec with moe_grouped_gemm (always, in its hybrid stack): TEGroupedMLP,
        // one GroupedLinear per projection holding expert i as weight<i>.
        for (int fc = 1; fc <= 2; ++fc) {
          names_.push_back("mlp.experts.linear_fc" + std::to_string(fc) + ".weight" + std::to_string(e));
          specs_[specs_.size() - 3 + static_cast<std::size_t>(fc)].te_name = names_.back().c_str();
        }
      }
      if (ep_.parallel() || expert_tp_.size() > 1) {
        // They hold every token of the ep group (under sequence parallelism every tp rank's
        // block that routes to them; under expert tensor parallelism every expert_tp rank's rows,
        // gathered): no part to sum over tp. Their copies on the other expert_dp ranks hold other
        // tokens wherever the expert grid does not follow the tp grid (ep > 1, or an expert_tp of
        // another size than tp): their gradients are summed over expert_dp.
        const bool other_tokens = ep_.parallel() || expert_tp_.size() != sequence_.size();
        for (plx_param_spec* expert : {&specs_[specs_.size() - 2], &specs_.back()}) {
          if (other_tokens) expert->grad_group = kExpertGradGroup;
          expert->flags &= ~uint32_t{PLX_PARAM_SEQUENCE_PARALLEL};
        }
      }
    }
    // Megatron's SharedExpertMLP names: one MLP of moe_shared_expert_intermediate_size.
    if (c.shared_ffn > 0) {
      shared_index_ = static_cast<uint32_t>(specs_.size());
      add("mlp.shared_experts.linear_fc1.weight", {shared_shape().fc1_rows(), c.hidden}, PLX_INIT_NORMAL,
          c.init_std, 0);
      add("mlp.shared_experts.linear_fc2.weight", {c.hidden, c.shared_ffn}, PLX_INIT_NORMAL,
          c.output_init_std, 0);
      // Megatron's shared expert gate: [1, C], initialized like the layer's other inputs.
      if (c.shared_expert_gate)
        add("mlp.shared_experts.gate_weight", {1, c.hidden}, PLX_INIT_NORMAL, c.init_std, 0);
    }
  }

  plx_layer_info info() const override {
    plx_layer_info i{};
    i.struct_size = sizeof(i);
    i.num_params = static_cast<uint32_t>(specs_.size());
    i.flags = PLX_LAYER_CONTEXT_PARALLEL;  // each rank's tokens; counts summed over tp x cp
    i.num_stages = static_cast<uint32_t>(steps_.size());
    i.num_inputs = 1;
    i.num_outputs = 1;
    return i;
  }

  plx_param_spec param(uint32_t index) const override {
    if (index >= specs_.size())
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  std::string(kComponent) + " has " + std::to_string(specs_.size()) +
                      " parameters; there is no parameter " + std::to_string(index));
    return specs_[index];
  }

  plx_stage_info stage(uint32_t index) const override {
    expect_stage(index);
    plx_stage_info s{};
    s.struct_size = sizeof(s);
    const Step step = steps_[index];
    s.kind = step == kDispatch || step == kCombine ? PLX_STAGE_COMM : PLX_STAGE_COMPUTE;
    s.name = kStepNames[step];
    return s;
  }

  void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs, uint32_t num_outputs,
                   plx_tensor_desc* outputs) const override {
    expect_counts("output_desc", num_inputs, num_outputs);
    expect_hidden_desc(inputs[0], config_.hidden, "input 0 (hidden states)");
    outputs[0] = inputs[0];
  }

  std::unique_ptr<plexus::sdk::LayerState> create_state(uint32_t /*microbatch*/) override {
    auto state = std::make_unique<MoeState>(static_cast<uint32_t>(steps_.size()));
    if (device_impl_) state->device = device_impl_->create_state();
    return state;
  }

  void forward(plexus::sdk::LayerState& state, uint32_t stage, const plx_forward_args& args) override {
    expect_call("forward", stage, args.num_inputs, args.num_outputs, args.num_params);
    auto& st = static_cast<MoeState&>(state);
    if (stage != st.next_forward)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) + ": forward stage " +
                                                std::to_string(stage) + " called before stage " +
                                                std::to_string(st.next_forward));
    if (precision_here(args.inputs[0].dtype, "input 0 (hidden states)") == Precision::f32)
      run_forward<float>(st, steps_[stage], args);
    else
      run_forward<double>(st, steps_[stage], args);
    st.next_forward = (stage + 1) % static_cast<uint32_t>(steps_.size());
  }

  void backward(plexus::sdk::LayerState& state, uint32_t stage, const plx_backward_args& args) override {
    expect_call("backward", stage, args.num_inputs, args.num_outputs, args.num_params);
    auto& st = static_cast<MoeState&>(state);
    if (!st.saved)
      throw Error(
          PLX_ERR_INVALID_ARGUMENT,
          "backward without a training forward of this microbatch (PLX_FORWARD_TRAINING was not set)");
    if (stage != st.next_backward)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) + ": backward stage " +
                                                std::to_string(stage) + " called before stage " +
                                                std::to_string(st.next_backward));
    const bool skip = (args.flags & PLX_BACKWARD_SKIP_WEIGHT_GRADS) != 0;
    if (skip && device_impl_)
      throw Error(PLX_ERR_UNSUPPORTED,
                  std::string(kComponent) +
                      " on CUDA: weight gradients split from backward (PLX_BACKWARD_SKIP_WEIGHT_GRADS, "
                      "backward_weights) are not built yet; run the scheduler without delayed "
                      "weight gradients (scheduler.options.delay_weight_gradients = false)");
    if (stage + 1 == steps_.size()) {
      if (st.weights_due)
        throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) + ": backward of microbatch " +
                                                  std::to_string(args.microbatch) +
                                                  " again before backward_weights of the previous one");
      st.skip_weights = skip;
    } else if (skip != st.skip_weights) {
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  std::string(kComponent) + ": backward stage " + std::to_string(stage) +
                      " with PLX_BACKWARD_SKIP_WEIGHT_GRADS " + (skip ? "set" : "clear") +
                      ", unlike the microbatch's earlier stages");
    }
    if (precision_here(args.grad_outputs[0].dtype, "grad output 0") == Precision::f32)
      run_backward<float>(st, steps_[stage], args);
    else
      run_backward<double>(st, steps_[stage], args);
    st.next_backward = stage == 0 ? static_cast<uint32_t>(steps_.size()) - 1 : stage - 1;
    if (stage == 0) st.weights_due = skip;
  }

  // The weight gradients that backward left out: each parameter gets the products backward would
  // have added, from the same operands, so the split changes no bit.
  void backward_weights(plexus::sdk::LayerState& state, const plx_backward_args& args) override {
    auto& st = static_cast<MoeState&>(state);
    if (!st.weights_due)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  std::string(kComponent) + ": backward_weights of microbatch " +
                      std::to_string(args.microbatch) +
                      " without a backward that left them out (PLX_BACKWARD_SKIP_WEIGHT_GRADS)");
    if (args.num_params != specs_.size())
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string("backward_weights: ") + kComponent + " has " +
                                                std::to_string(specs_.size()) + " parameters, got " +
                                                std::to_string(args.num_params));
    if (st.precision == Precision::f32)
      run_backward_weights<float>(st, args);
    else
      run_backward_weights<double>(st, args);
    st.weights_due = false;
  }

  // The matrix products as run, 2 FLOPs per multiply-add: the router ([N, C] x [C, E]) and, for
  // each of the N k routed rows, fc1 and fc2. Backward: twice the forward.
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_counts("estimate_flops", num_inputs, 1);
    expect_hidden_desc(inputs[0], config_.hidden, "input 0 (hidden states)");
    const MoeConfig& c = config_;
    const double n = static_cast<double>(inputs[0].dims[0]) * static_cast<double>(inputs[0].dims[1]);
    const double h = static_cast<double>(c.hidden);
    forward =
        2 * n * h * static_cast<double>(c.experts) +
        2 * n * static_cast<double>(c.topk) * h * static_cast<double>(c.fc1_rows() + c.ffn) +
        2 * n * h * static_cast<double>(c.shared_ffn > 0 ? shared_shape().fc1_rows() + c.shared_ffn : 0);
    backward = 2 * forward;
  }

  // ABI 1.10: what a training forward keeps, for n tokens routed to k experts each, as n k rows
  // (an upper bound under a capacity, which drops some) spread evenly over the ep ranks: the
  // pre-norm's output, normalized rows and 1/std; the router's logits, scores, probabilities,
  // log-sum-exp and choices; the permutation; the routed rows in and out and the experts' fc1
  // output and activation (under ep the rows received, regrouped and sent back too; under expert
  // tensor parallelism every expert_tp rank's rows, gathered, at 1/expert_tp of the width); the
  // shared experts' activations and output.
  double estimate_activation_bytes(uint32_t num_inputs, const plx_tensor_desc* inputs,
                                   const plx_activation_query& /*query*/) const override {
    expect_counts("estimate_activation_bytes", num_inputs, 1);
    expect_hidden_desc(inputs[0], config_.hidden, "input 0 (hidden states)");
    if (device_impl_) throw Error(PLX_ERR_UNSUPPORTED, "moe.layer: no activation estimate on CUDA");
    const MoeConfig& c = config_;
    const double n = static_cast<double>(inputs[0].dims[0]) * static_cast<double>(inputs[0].dims[1]);
    const double h = static_cast<double>(c.hidden), e = static_cast<double>(c.experts),
                 k = static_cast<double>(c.topk), rows = n * k;
    const auto etp = static_cast<double>(expert_tp_.size());
    const double expert_rows = rows * etp;  // what the experts run on
    double values = n * (2 * h + 1) + n * (2 * e + k + 1) + rows * 2 * h +
                    expert_rows * static_cast<double>(expert_shape().fc1_rows() + expert_shape().ffn);
    if (ep_.parallel()) values += rows * 4 * h;
    if (etp > 1) values += expert_rows * h;
    if (c.shared_ffn > 0)
      values += n * static_cast<double>(shared_shape().fc1_rows() + c.shared_ffn) + n * h +
                (c.shared_expert_gate ? n : 0);
    const double element = static_cast<double>(inputs[0].dtype.bits) / 8.0;
    const double indices =
        4 * n * k + 8 * (e + 1 + rows + n * k) + 16 * e + (c.capacity_factor > 0 ? n * k : 0);
    return element * values + indices;
  }

 private:
  // Marks an expert's fc1 and fc2 as this rank's shards over expert_tp (plx_param_spec.tp_group:
  // the host cuts, gathers and norms them over it): fc1 on its rows, SwiGLU's as the two parts
  // [gate_r; up_r], fc2 on its columns (Megatron's column- and row-parallel expert linears).
  void split_expert(std::size_t fc1, std::size_t fc2) {
    if (config_.swiglu && fc1_parts_.empty()) fc1_parts_ = {config_.ffn, config_.ffn};
    specs_[fc1].flags |= PLX_PARAM_TENSOR_PARALLEL;
    specs_[fc1].tp_dim = 0;
    specs_[fc1].tp_num_parts = static_cast<uint32_t>(fc1_parts_.size());
    specs_[fc1].tp_part_sizes = fc1_parts_.empty() ? nullptr : fc1_parts_.data();
    specs_[fc2].flags |= PLX_PARAM_TENSOR_PARALLEL;
    specs_[fc2].tp_dim = 1;
    specs_[fc1].tp_group = specs_[fc2].tp_group = "expert_tp";
  }

  // Under sequence parallelism every trained parameter sees this rank's tokens only: its gradient
  // is a part the host sums over tp (PLX_PARAM_SEQUENCE_PARALLEL); a buffer has none.
  void add(const std::string& name, std::initializer_list<int64_t> dims, uint32_t init, double std_dev,
           uint32_t flags) {
    names_.push_back(name);
    if (sequence_.size() > 1 && (flags & PLX_PARAM_BUFFER) == 0) flags |= PLX_PARAM_SEQUENCE_PARALLEL;
    plx_param_spec p = plexus::sdk::param_spec(names_.back().c_str(), dims, init, std_dev, flags);
    specs_.push_back(p);
  }

  // float32 or float64 on the CPU; float32 only on CUDA.
  Precision precision_here(DLDataType dtype, const std::string& what) const {
    const Precision p = precision_of(dtype, what);
    if (device_impl_ && p != Precision::f32)
      throw Error(PLX_ERR_UNSUPPORTED, std::string(kComponent) + " on CUDA (" +
                                           plexus::sdk::device_text(device_) + "): " + what + " is " +
                                           plexus::sdk::dtype_name(dtype) +
                                           "; float64 is not built yet on CUDA (float32 only)");
    return p;
  }

  void expect_stage(uint32_t stage) const {
    if (stage >= steps_.size())
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) + " has " +
                                                std::to_string(steps_.size()) + " stages; no stage " +
                                                std::to_string(stage));
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
    if (num_params != specs_.size())
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(what) + ": " + kComponent + " has " +
                                                std::to_string(specs_.size()) + " parameters, got " +
                                                std::to_string(num_params));
  }
  void expect_params(const DLTensor* params, const DLTensor* grads, DLDataType dtype) const {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      const plx_param_spec& p = specs_[i];
      const std::string name = std::string("parameter ") + p.name;
      expect_tensor(params[i], device_, dtype, p.desc.dims, p.desc.ndim, name);
      if (grads != nullptr && grads[i].data != nullptr)
        expect_tensor(grads[i], device_, dtype, p.desc.dims, p.desc.ndim, "gradient of " + name);
    }
  }

  // One expert's MLP as this rank computes it: 1/expert_tp of its width.
  MlpShape expert_shape() const {
    return MlpShape{config_.hidden, config_.ffn / expert_tp_.size(), config_.swiglu};
  }
  MlpShape shared_shape() const { return MlpShape{config_.hidden, config_.shared_ffn, config_.swiglu}; }

  template <class T>
  ExpertWeights<T> shared_weights(const DLTensor* p) const {
    ExpertWeights<T> w;
    w.fc1.push_back(data<T>(p[shared_index_]));
    w.fc2.push_back(data<T>(p[shared_index_ + 1]));
    return w;
  }

  template <class T>
  ExpertWeights<T> expert_weights(const DLTensor* p) const {
    ExpertWeights<T> w;
    for (int64_t e = 0; e < ep_.local_experts; ++e) {
      w.fc1.push_back(data<T>(p[experts_index_ + 2 * e]));
      w.fc2.push_back(data<T>(p[experts_index_ + 2 * e + 1]));
    }
    return w;
  }
  template <class T>
  static T* grad_or_null(const DLTensor* g, std::size_t i) {
    return g != nullptr && g[i].data != nullptr ? data<T>(g[i]) : nullptr;
  }

  // What a training forward reports: the auxiliary losses (and the pairs a capacity dropped), as
  // "<plugin>/layer<i>.<name>" values of the run's metrics stream (the step record holds their
  // mean over the microbatches). The tokens per expert are reported once per step, by after_step.
  void report(double aux_loss, double z_loss, int64_t dropped) const {
    const plexus::sdk::Host host = plexus::sdk::Host::current();
    const plx_host_api* api = host.api();
    if (tokens_.size() > 1) {  // each rank's losses are its tokens' parts: the whole microbatch's sum
      double losses[2] = {aux_loss, z_loss};
      int64_t extent = 2;
      DLTensor view{losses, DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 64, 1}, &extent, nullptr, 0};
      tokens_.all_reduce(view);
      aux_loss = losses[0];
      z_loss = losses[1];
    }
    if (!PLX_HAS_FIELD(api, plx_host_api, report_metric) || api->report_metric == nullptr) return;
    const std::string prefix = "layer" + std::to_string(layer_index_) + ".";
    api->report_metric(api->ctx, (prefix + "aux_loss").c_str(), aux_loss);
    api->report_metric(api->ctx, (prefix + "z_loss").c_str(), z_loss);
    if (config_.capacity_factor > 0)
      api->report_metric(api->ctx, (prefix + "dropped_pairs").c_str(), static_cast<double>(dropped));
  }

 public:
  // After the optimizer step: the step's tokens per expert over every data-parallel rank, reported
  // once, and the expert bias's update from them.
  void after_step(const plx_step_args& args) override {
    const plexus::sdk::Host host = plexus::sdk::Host::current();
    // On a GPU through device memory (a GPU's comm backend reduces nothing else).
    ExpertLoad::Reduce on_device;
    if (device_impl_)
      on_device = [&](plx_group group, std::vector<double>& values) {
        device_impl_->all_reduce_sum(*host.api(), group, values);
      };
    const std::vector<double> counts = load_.take_global(*host.api(), on_device, tokens_);
    const plx_host_api* api = host.api();
    double total = 0;
    for (double n : counts) total += n;
    if (total > 0 && PLX_HAS_FIELD(api, plx_host_api, report_metric) && api->report_metric != nullptr) {
      const std::string prefix = "layer" + std::to_string(layer_index_) + ".tokens_per_expert.";
      for (std::size_t e = 0; e < counts.size(); ++e)
        api->report_metric(api->ctx, (prefix + std::to_string(e)).c_str(), counts[e]);
    }
    if (!config_.expert_bias || total == 0) return;  // no training forward in this step: nothing to balance
    if (args.num_params != specs_.size() || args.params == nullptr)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string("after_step: ") + kComponent + " has " +
                                                std::to_string(specs_.size()) + " parameters, got " +
                                                std::to_string(args.num_params));
    DLTensor& bias = args.params[bias_index_];
    const std::string name = "parameter mlp.router.expert_bias";
    if (device_impl_) {  // on the GPU (float32 only): updated in a host copy
      expect_tensor(bias, device_, dtype_of(Precision::f32), {config_.experts}, name);
      std::vector<float> host_bias(sz(config_.experts));
      device_impl_->download(data<float>(bias), host_bias.size() * sizeof(float), host_bias.data());
      update_expert_bias(host_bias.data(), counts, config_.bias_update_rate);
      device_impl_->upload(host_bias.data(), host_bias.size() * sizeof(float), data<float>(bias));
    } else if (bias.dtype.code == kDLFloat && bias.dtype.bits == 64) {
      expect_tensor(bias, dtype_of(Precision::f64), {config_.experts}, name);
      update_expert_bias(data<double>(bias), counts, config_.bias_update_rate);
    } else {
      expect_tensor(bias, dtype_of(Precision::f32), {config_.experts}, name);
      update_expert_bias(data<float>(bias), counts, config_.bias_update_rate);
    }
  }

 private:
  template <class T>
  void run_forward(MoeState& st, Step stage, const plx_forward_args& args) {
    const MoeConfig& c = config_;
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.inputs[0], device_, dt, c.hidden, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], device_, dt, {batch, seq, c.hidden}, "output 0");
    expect_params(args.params, nullptr, dt);
    const int64_t n = batch * seq;
    if constexpr (std::is_same_v<T, float>) {
      if (device_impl_) {
        cuda_forward(st, stage, args, batch, seq);
        return;
      }
    }
    if (stage == kRoute) {
      st.saved = false;  // a failed or inference forward leaves nothing a backward could use
      st.precision = precision_v<T>;
      st.batch = batch;
      st.seq = seq;
      const T* w_norm = data<T>(args.params[0]);
      T* u = st.u.get<T>(sz(n * c.hidden));
      T* xhat = st.xhat.get<T>(sz(n * c.hidden));
      T* rstd = st.rstd.get<T>(sz(n));
      if (c.rms_prenorm)
        k::rmsnorm_forward<T>(n, c.hidden, data<T>(args.inputs[0]), w_norm, static_cast<T>(c.prenorm_eps), u,
                              xhat, rstd);
      else
        k::layernorm_forward<T>(n, c.hidden, data<T>(args.inputs[0]), w_norm, data<T>(args.params[1]),
                                static_cast<T>(c.prenorm_eps), u, xhat, rstd);
      router_forward<T>(c, n, u, data<T>(args.params[router_index_]),
                        c.expert_bias ? data<T>(args.params[bias_index_]) : nullptr, st.router, tokens_);
      int64_t dropped = 0;
      if (c.capacity_factor > 0)
        dropped = apply_capacity<T>(c, n, st.router.chosen.data(), st.router.probs.data<T>(), st.kept);
      st.perm = Permutation::build(n, c.topk, c.experts, st.router.chosen.data(),
                                   c.capacity_factor > 0 ? st.kept.data() : nullptr);
      permute_forward<T>(st.perm, c.hidden, u, st.x_perm.get<T>(sz(st.perm.rows() * c.hidden)));
      if ((args.flags & PLX_FORWARD_TRAINING) != 0) {
        report(st.router.aux_loss, st.router.z_loss, dropped);
        load_.add(st.perm.offsets);
      }
      return;
    }
    expect_same_call(st, batch, seq);
    const plx_host_api& host = *plexus::sdk::Host::current().api();
    const int64_t rows = st.perm.rows();
    if (stage == kDispatch) {
      st.layout = ExchangeLayout::build(ep_, st.perm.offsets,
                                        exchange_counts(host, ep_, st.perm.offsets, args.comm_stream));
      T* x_recv = st.x_recv.get<T>(at_least_one(st.layout.received() * c.hidden));
      st.x_perm.get<T>(at_least_one(rows * c.hidden));
      st.pending = start_rows_exchange<T>(host, ep_, st.x_perm.data<T>(), st.layout.send_rows,
                                          st.layout.send_offsets, x_recv, st.layout.recv_rows,
                                          st.layout.recv_offsets, c.hidden, args.comm_stream);
      return;
    }
    if (stage == kCombine) {
      T* y_perm = st.y_perm.get<T>(at_least_one(rows * c.hidden));
      st.pending = start_rows_exchange<T>(host, ep_, st.y_send.data<T>(), st.layout.recv_rows,
                                          st.layout.recv_offsets, y_perm, st.layout.send_rows,
                                          st.layout.send_offsets, c.hidden, args.comm_stream);
      return;
    }
    if (stage == kExperts) {
      if (ep_.parallel()) {
        wait_exchange(host, st.pending);
        const int64_t received = st.layout.received();
        T* x_local = st.x_local.get<T>(at_least_one(received * c.hidden));
        to_expert_major<T>(st.layout, c.hidden, st.x_recv.data<T>(), x_local);
        T* y_local = st.y_local.get<T>(at_least_one(received * c.hidden));
        run_experts<T>(st, st.layout.expert_offsets, args.params, x_local, y_local);
        to_source_major<T>(st.layout, c.hidden, y_local, st.y_send.get<T>(at_least_one(received * c.hidden)));
      } else {
        run_experts<T>(st, st.perm.offsets, args.params, st.x_perm.data<T>(),
                       st.y_perm.get<T>(sz(rows * c.hidden)));
      }
      if (c.shared_ffn > 0) {
        experts_forward<T>(shared_shape(), {0, n}, shared_weights<T>(args.params), st.u.data<T>(), st.shared,
                           st.shared_y.get<T>(sz(n * c.hidden)));
        if (c.shared_expert_gate) shared_gate_forward<T>(st, data<T>(args.params[shared_index_ + 2]));
      }
      return;
    }
    wait_exchange(host, st.pending);
    T* out = data<T>(args.outputs[0]);
    unpermute_forward<T>(st.perm, c.hidden, st.y_perm.data<T>(), st.router.probs.data<T>(), out);
    if (c.shared_ffn > 0) {
      const T* shared = st.shared_y.data<T>();
      const T* gate = c.shared_expert_gate ? st.gate.data<T>() : nullptr;
      for (int64_t t = 0; t < n; ++t) {
        const T g = gate != nullptr ? gate[t] : T(1);
        for (int64_t i = t * c.hidden; i < (t + 1) * c.hidden; ++i) out[i] += g * shared[i];
      }
    }
    st.saved = (args.flags & PLX_FORWARD_TRAINING) != 0;
    st.next_backward = static_cast<uint32_t>(steps_.size()) - 1;
  }

  // The local experts on this rank's rows x [rows of `offsets`, C] (expert-major) into y. Under
  // expert tensor parallelism every expert_tp rank's rows are gathered, this rank's shards run on
  // all of them and the partial outputs are summed back to the rows' ranks.
  template <class T>
  void run_experts(MoeState& st, const std::vector<int64_t>& offsets, const DLTensor* params, const T* x,
                   T* y) {
    if (expert_tp_.size() <= 1)
      return experts_forward<T>(expert_shape(), offsets, expert_weights<T>(params), x, st.experts, y);
    const int64_t h = config_.hidden;
    st.etp = EtpLayout::build(expert_tp_, offsets);
    std::vector<T> scratch;
    T* x_all = st.x_etp.get<T>(at_least_one(st.etp.total() * h));
    etp_gather_rows<T>(expert_tp_, st.etp, x, h, x_all, scratch);
    k::Buffer y_buf;
    T* y_all = y_buf.get<T>(at_least_one(st.etp.total() * h));
    experts_forward<T>(expert_shape(), st.etp.offsets, expert_weights<T>(params), x_all, st.experts, y_all);
    etp_scatter_sum_rows<T>(expert_tp_, st.etp, y_all, h, y, scratch);
  }

  // The backward's input part: dy of this rank's rows to dx, fc1's output gradient kept for the
  // weights; under expert tensor parallelism over every expert_tp rank's rows (their dy gathered
  // and kept, dx's parts summed back to the rows' ranks).
  template <class T>
  void run_experts_backward(MoeState& st, const std::vector<int64_t>& offsets, const DLTensor* params,
                            const T* dy, T* dx) {
    if (expert_tp_.size() <= 1)
      return experts_backward_inputs<T>(expert_shape(), offsets, expert_weights<T>(params), st.experts, dy,
                                        dx, st.da_experts);
    const int64_t h = config_.hidden;
    std::vector<T> scratch;
    T* dy_all = st.dy_etp.get<T>(at_least_one(st.etp.total() * h));
    etp_gather_rows<T>(expert_tp_, st.etp, dy, h, dy_all, scratch);
    k::Buffer dx_buf;
    T* dx_all = dx_buf.get<T>(at_least_one(st.etp.total() * h));
    experts_backward_inputs<T>(expert_shape(), st.etp.offsets, expert_weights<T>(params), st.experts, dy_all,
                               dx_all, st.da_experts);
    etp_scatter_sum_rows<T>(expert_tp_, st.etp, dx_all, h, dx, scratch);
  }

  void expect_same_call(const MoeState& st, int64_t batch, int64_t seq) const {
    if (st.batch != batch || st.seq != seq)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) + ": a stage of shape [" +
                                                std::to_string(batch) + ", " + std::to_string(seq) +
                                                "] after a route stage of [" + std::to_string(st.batch) +
                                                ", " + std::to_string(st.seq) + "]");
  }

  template <class T>
  void run_backward(MoeState& st, Step stage, const plx_backward_args& args) {
    const MoeConfig& c = config_;
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.grad_outputs[0], device_, dt, c.hidden, "grad output 0", batch, seq);
    if (st.precision != precision_v<T>)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string("backward in ") + plexus::sdk::dtype_name(dt) +
                                                " after a forward in " +
                                                plexus::sdk::dtype_name(dtype_of(st.precision)));
    expect_same_call(st, batch, seq);
    expect_params(args.params, args.param_grads, dt);
    if constexpr (std::is_same_v<T, float>) {
      if (device_impl_) {
        cuda_backward(st, stage, args, batch, seq);
        return;
      }
    }
    const int64_t n = batch * seq, rows = st.perm.rows();
    const plx_host_api& host = *plexus::sdk::Host::current().api();
    if (stage == kCombine) {  // the output gradients to the experts' ranks
      T* dy_recv = st.dy_recv.get<T>(at_least_one(st.layout.received() * c.hidden));
      st.pending = start_rows_exchange<T>(host, ep_, st.dy_perm.data<T>(), st.layout.send_rows,
                                          st.layout.send_offsets, dy_recv, st.layout.recv_rows,
                                          st.layout.recv_offsets, c.hidden, args.comm_stream);
      return;
    }
    if (stage == kDispatch) {  // the experts' input gradients back to the rows' ranks
      T* dx_perm = st.dx_perm.get<T>(at_least_one(rows * c.hidden));
      st.pending = start_rows_exchange<T>(host, ep_, st.dx_send.data<T>(), st.layout.recv_rows,
                                          st.layout.recv_offsets, dx_perm, st.layout.send_rows,
                                          st.layout.send_offsets, c.hidden, args.comm_stream);
      return;
    }
    if (stage == kUnpermute) {
      unpermute_backward<T>(st.perm, c.hidden, data<T>(args.grad_outputs[0]), st.y_perm.data<T>(),
                            st.router.probs.data<T>(), st.dy_perm.get<T>(at_least_one(rows * c.hidden)),
                            st.dprobs.get<T>(sz(n * c.topk)));
      return;
    }
    if (stage == kExperts) {
      if (ep_.parallel()) {
        wait_exchange(host, st.pending);
        const int64_t received = st.layout.received();
        T* dy_local = st.dy_local.get<T>(at_least_one(received * c.hidden));
        to_expert_major<T>(st.layout, c.hidden, st.dy_recv.data<T>(), dy_local);
        T* dx_local = st.dx_local.get<T>(at_least_one(received * c.hidden));
        run_experts_backward<T>(st, st.layout.expert_offsets, args.params, dy_local, dx_local);
        to_source_major<T>(st.layout, c.hidden, dx_local,
                           st.dx_send.get<T>(at_least_one(received * c.hidden)));
      } else {
        run_experts_backward<T>(st, st.perm.offsets, args.params, st.dy_perm.data<T>(),
                                st.dx_perm.get<T>(at_least_one(rows * c.hidden)));
      }
      if (c.shared_ffn > 0) {
        // Its output gradient is the layer's, which the host may change once backward returns.
        const T* dy = data<T>(args.grad_outputs[0]);
        std::copy(dy, dy + n * c.hidden, st.dy_shared.get<T>(sz(n * c.hidden)));
        if (c.shared_expert_gate) shared_gate_backward<T>(st);
        experts_backward_inputs<T>(shared_shape(), {0, n}, shared_weights<T>(args.params), st.shared,
                                   st.dy_shared.data<T>(), st.du_shared.get<T>(sz(n * c.hidden)),
                                   st.da_shared);
      }
      if (!st.skip_weights) experts_weights<T>(st, args.param_grads);
      return;
    }
    // Route: du = (the experts' input gradient, un-permuted) + dlogits Wr; dWr += dlogits^T u;
    // then the pre-norm.
    wait_exchange(host, st.pending);
    T* du = st.du.get<T>(sz(n * c.hidden));
    permute_backward<T>(st.perm, c.hidden, st.dx_perm.data<T>(), du);
    if (c.shared_ffn > 0) {
      const T* shared = st.du_shared.data<T>();
      for (int64_t i = 0; i < n * c.hidden; ++i) du[i] += shared[i];
      if (c.shared_expert_gate)  // du += dlogit_gate g
        k::gemm_parallel<T>(k::Trans::N, k::Trans::N, n, c.hidden, 1, T(1), st.dgate_logit.data<T>(), 1,
                            data<T>(args.params[shared_index_ + 2]), c.hidden, T(1), du, c.hidden);
    }
    T* dlogits = st.dlogits.get<T>(sz(n * c.experts));
    // Under context parallelism the router's gradients are averaged over the cp ranks, whose aux
    // and z losses are parts of one sum: their terms count cp times (Megatron's x cp).
    router_backward<T>(c, st.router, st.dprobs.data<T>(), plx_backward_loss_scale(&args) * cp_size_, dlogits);
    const T* w_router = data<T>(args.params[router_index_]);
    k::gemm_parallel<T>(k::Trans::N, k::Trans::N, n, c.hidden, c.experts, T(1), dlogits, c.experts, w_router,
                        c.hidden, T(1), du, c.hidden);
    T* dx = nullptr;
    if (args.grad_inputs[0].data != nullptr) {
      expect_tensor(args.grad_inputs[0], dt, {batch, seq, c.hidden}, "grad input 0");
      dx = data<T>(args.grad_inputs[0]);
    }
    // The pre-norm's input gradient now, its weight gradients with the others: the kernel sums
    // the same partial products whether or not it also writes dx.
    if (dx != nullptr) norm_backward<T>(st, data<T>(args.params[0]), dx, nullptr, nullptr);
    if (!st.skip_weights) route_weights<T>(st, args.param_grads);
  }

  template <class T>
  void run_backward_weights(MoeState& st, const plx_backward_args& args) const {
    expect_params(args.params, args.param_grads, dtype_of(precision_v<T>));
    experts_weights<T>(st, args.param_grads);
    route_weights<T>(st, args.param_grads);
  }

  // The experts' and shared experts' weight gradients, from what their backward kept.
  template <class T>
  void experts_weights(const MoeState& st, const DLTensor* grads) const {
    ExpertGrads<T> g;
    for (int64_t e = 0; e < ep_.local_experts; ++e) {
      g.fc1.push_back(grad_or_null<T>(grads, experts_index_ + 2 * sz(e)));
      g.fc2.push_back(grad_or_null<T>(grads, experts_index_ + 2 * sz(e) + 1));
    }
    if (expert_tp_.size() > 1)  // every expert_tp rank's rows
      experts_backward_weights<T>(expert_shape(), st.etp.offsets, g, st.experts, st.x_etp.data<T>(),
                                  st.dy_etp.data<T>(), st.da_experts);
    else if (ep_.parallel())
      experts_backward_weights<T>(expert_shape(), st.layout.expert_offsets, g, st.experts,
                                  st.x_local.data<T>(), st.dy_local.data<T>(), st.da_experts);
    else
      experts_backward_weights<T>(expert_shape(), st.perm.offsets, g, st.experts, st.x_perm.data<T>(),
                                  st.dy_perm.data<T>(), st.da_experts);
    if (config_.shared_ffn > 0) {
      ExpertGrads<T> sg;
      sg.fc1.push_back(grad_or_null<T>(grads, shared_index_));
      sg.fc2.push_back(grad_or_null<T>(grads, shared_index_ + 1));
      experts_backward_weights<T>(shared_shape(), {0, st.batch * st.seq}, sg, st.shared, st.u.data<T>(),
                                  st.dy_shared.data<T>(), st.da_shared);
    }
  }

  // The router's (dWr += dlogits^T u) and the pre-norm's weight gradients.
  template <class T>
  void route_weights(const MoeState& st, const DLTensor* grads) const {
    const MoeConfig& c = config_;
    const int64_t n = st.batch * st.seq;
    if (T* dw_router = grad_or_null<T>(grads, router_index_))
      k::gemm_parallel<T>(k::Trans::T, k::Trans::N, c.experts, c.hidden, n, T(1), st.dlogits.data<T>(),
                          c.experts, st.u.data<T>(), c.hidden, T(1), dw_router, c.hidden);
    if (c.shared_expert_gate)  // dg += dlogit_gate^T u
      if (T* dw_gate = grad_or_null<T>(grads, shared_index_ + 2))
        k::gemm_parallel<T>(k::Trans::T, k::Trans::N, 1, c.hidden, n, T(1), st.dgate_logit.data<T>(), 1,
                            st.u.data<T>(), c.hidden, T(1), dw_gate, c.hidden);
    T* dw = grad_or_null<T>(grads, 0);
    T* db = c.rms_prenorm ? nullptr : grad_or_null<T>(grads, 1);
    if (dw != nullptr || db != nullptr) norm_backward<T>(st, nullptr, nullptr, dw, db);
  }

  // Megatron's shared expert gate: gate_t = sigmoid(u_t . g), the shared experts' output of token
  // t multiplied by it.
  template <class T>
  void shared_gate_forward(MoeState& st, const T* g) const {
    const int64_t n = st.batch * st.seq, h = config_.hidden;
    const T* u = st.u.data<T>();
    T* gate = st.gate.get<T>(sz(n));
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; ++t) {
      T logit = 0;
      for (int64_t i = 0; i < h; ++i) logit += u[t * h + i] * g[i];
      gate[t] = T(1) / (T(1) + std::exp(-logit));
    }
  }

  // From the layer's output gradient in dy_shared: the gate's logit gradient, dlogit_t = gate_t
  // (1 - gate_t) sum_i dy_ti y_ti (y: the shared experts' output before the gate), then dy_shared
  // scaled by the gate (the shared experts' output gradient).
  template <class T>
  void shared_gate_backward(MoeState& st) const {
    const int64_t n = st.batch * st.seq, h = config_.hidden;
    const T* gate = st.gate.data<T>();
    const T* y = st.shared_y.data<T>();
    T* dy = st.dy_shared.data<T>();
    T* dlogit = st.dgate_logit.get<T>(sz(n));
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; ++t) {
      T dot = 0;
      for (int64_t i = 0; i < h; ++i) dot += dy[t * h + i] * y[t * h + i];
      dlogit[t] = dot * gate[t] * (T(1) - gate[t]);
      for (int64_t i = 0; i < h; ++i) dy[t * h + i] *= gate[t];
    }
  }

  template <class T>
  void norm_backward(const MoeState& st, const T* w_norm, T* dx, T* dw, T* db) const {
    const MoeConfig& c = config_;
    const int64_t n = st.batch * st.seq;
    if (c.rms_prenorm)
      k::rmsnorm_backward<T>(n, c.hidden, st.du.data<T>(), st.xhat.data<T>(), st.rstd.data<T>(), w_norm, dx,
                             dw);
    else
      k::layernorm_backward<T>(n, c.hidden, st.du.data<T>(), st.xhat.data<T>(), st.rstd.data<T>(), w_norm, dx,
                               dw, db);
  }

  // The parameters and their gradients as the CUDA path takes them (float32, on the device).
  DeviceWeights device_weights(const DLTensor* p) const {
    DeviceWeights w;
    w.norm_w = data<float>(p[0]);
    if (!config_.rms_prenorm) w.norm_b = data<float>(p[1]);
    w.router = data<float>(p[router_index_]);
    if (config_.expert_bias) w.bias = data<float>(p[bias_index_]);
    const ExpertWeights<float> e = expert_weights<float>(p);
    w.fc1 = e.fc1;
    w.fc2 = e.fc2;
    if (config_.shared_ffn > 0) {
      w.shared_fc1 = data<float>(p[shared_index_]);
      w.shared_fc2 = data<float>(p[shared_index_ + 1]);
    }
    return w;
  }
  DeviceGrads device_grads(const DLTensor* g) const {
    DeviceGrads d;
    d.norm_w = grad_or_null<float>(g, 0);
    if (!config_.rms_prenorm) d.norm_b = grad_or_null<float>(g, 1);
    d.router = grad_or_null<float>(g, router_index_);
    for (int64_t e = 0; e < ep_.local_experts; ++e) {
      d.fc1.push_back(grad_or_null<float>(g, experts_index_ + 2 * sz(e)));
      d.fc2.push_back(grad_or_null<float>(g, experts_index_ + 2 * sz(e) + 1));
    }
    if (config_.shared_ffn > 0) {
      d.shared_fc1 = grad_or_null<float>(g, shared_index_);
      d.shared_fc2 = grad_or_null<float>(g, shared_index_ + 1);
    }
    return d;
  }

  // A checked forward stage on the GPU (ep = 1: route, experts, unpermute).
  void cuda_forward(MoeState& st, Step stage, const plx_forward_args& args, int64_t batch, int64_t seq) {
    const bool training = (args.flags & PLX_FORWARD_TRAINING) != 0;
    const DeviceWeights w = device_weights(args.params);
    if (stage == kRoute) {
      st.saved = false;
      st.precision = Precision::f32;
      st.batch = batch;
      st.seq = seq;
      const RouteResult r = device_impl_->route(*st.device, w, batch * seq, data<float>(args.inputs[0]),
                                                training, args.compute_stream);
      if (training) {
        report(r.aux_loss, r.z_loss, r.dropped);
        load_.add(r.offsets);
      }
      return;
    }
    expect_same_call(st, batch, seq);
    if (stage == kExperts) {
      device_impl_->experts(*st.device, w, args.compute_stream);
      return;
    }
    device_impl_->unpermute(*st.device, data<float>(args.outputs[0]), args.compute_stream);
    st.saved = training;
    st.next_backward = static_cast<uint32_t>(steps_.size()) - 1;
  }

  // A checked backward stage on the GPU, in reverse order.
  void cuda_backward(MoeState& st, Step stage, const plx_backward_args& args, int64_t batch, int64_t seq) {
    const DeviceWeights w = device_weights(args.params);
    const float* dout = data<float>(args.grad_outputs[0]);
    if (stage == kUnpermute) {
      device_impl_->unpermute_backward(*st.device, dout, args.compute_stream);
      return;
    }
    const DeviceGrads g = device_grads(args.param_grads);
    if (stage == kExperts) {
      device_impl_->experts_backward(*st.device, w, g, dout, args.compute_stream);
      return;
    }
    float* dx = nullptr;
    if (args.grad_inputs[0].data != nullptr) {
      expect_tensor(args.grad_inputs[0], device_, plx_dtype_f32(), {batch, seq, config_.hidden},
                    "grad input 0");
      dx = data<float>(args.grad_inputs[0]);
    }
    device_impl_->route_backward(*st.device, w, g, plx_backward_loss_scale(&args), dx, args.compute_stream);
  }

  static constexpr const char* kExpertGradGroup = "expert_dp";

  MoeConfig config_;
  uint32_t layer_index_ = 0;
  // The tp group: under sequence parallelism (required at tp > 1) the ranks holding the
  // microbatch's other tokens; one rank otherwise.
  plexus::sdk::Group sequence_;
  // Context parallelism: the cp group's size, and the ranks holding the microbatch's other tokens
  // (tp x cp; tp alone without cp), over which the router's counts and losses are summed.
  int32_t cp_size_ = 1;
  plexus::sdk::Group tokens_;
  ExpertGroup ep_;                 // this rank's experts: all of them without an ep group
  // Expert tensor parallelism: the group each expert's width is split over (one rank: whole).
  plexus::sdk::Group expert_tp_;
  std::vector<int64_t> fc1_parts_;  // SwiGLU's [gate; up] whole parts (plx_param_spec.tp_part_sizes)
  std::vector<Step> steps_;        // stage index -> step
  std::deque<std::string> names_;  // the specs' names point into it (a deque never moves them)
  std::vector<plx_param_spec> specs_;
  ExpertLoad load_;  // the step's tokens per expert, from its training forwards
  uint32_t router_index_ = 0, bias_index_ = 0, experts_index_ = 0, shared_index_ = 0;
  DLDevice device_;
  std::unique_ptr<MoeDevice> device_impl_;  // a CUDA device's implementation; null on the CPU
};

}  // namespace

const plx_component_desc* layer_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<MoeLayer>(
      kComponent,
      "a mixture-of-experts MLP (Megatron-LM's MoELayer), F only: pre_mlp_layernorm, top-k router, "
      "experts as grouped products over tokens sorted by expert, expert-parallel over the \"ep\" group "
      "(dispatch and combine all-to-alls as comm stages); CPU, float32 and float64; CUDA, float32 (ep = 1)",
      options_schema());
  return &desc;
}

}  // namespace plexus::moe
