// The Model's private structures, shared by the files that implement it.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "engine/sharded_parameters.hpp"
#include "plexus/core/engine/model.hpp"

namespace plexus {

enum class UnitRole { embedding, decoder, final_norm, head };  // declared in model.hpp

struct Model::Unit {
  std::string label;  // for messages: "decoder.layers.2 attention (transformer.attention)"
  UnitRole role = UnitRole::decoder;
  std::string component;
  std::string symbol;                                 // decoder layers: the pattern symbol
  int64_t physical = -1, logical = -1, segment = -1;  // decoder layers: their numbers
  std::unique_ptr<ConfigHandle> config;
  std::unique_ptr<LayerInstance> layer;
  std::vector<std::size_t> params;  // indices into the ParameterStore, in the layer's order
  std::vector<std::size_t> gradient_params;  // params and, under mHC, the connection's: what backward writes
  std::vector<DLTensor> param_views;
  std::vector<DLTensor> grad_views;
  std::vector<plx_stage_info> stages;
  uint32_t num_outputs = 0;
  // Decoder sublayers under mHC: the connection's parameters (indices into the store) and the
  // three gates packed as the [3] tensor the "mhc" family takes.
  struct Mhc {
    std::size_t phi = 0, alpha_pre = 0, alpha_post = 0, alpha_res = 0, bias = 0;
    Tensor alpha;
    std::string label;  // "<unit label> mHC": its parameters' owner, its part in a step profile
  };
  std::unique_ptr<Mhc> mhc;
};

// What the mHC connection around one decoder unit keeps from forward for backward: its input
// stream x [T, n, C], the mapping tensors, and F's output f. The backward gradients live here
// between the unit's first and last backward stage.
struct MhcSaved {
  Tensor x, p, r, h_pre, h_post, h_res, u, f;
  Tensor dx, df, dh_pre, dh_post, dh_res;
};

// Where a unit's weight gradients stand in one microbatch when the scheduler splits them off.
enum class WeightGrads : uint8_t {
  with_backward,  // computed by backward (not split): nothing to wait for
  due,            // backward ran without them; the state waits for backward_weights
  done,           // backward_weights ran
};

// One microbatch in flight: its layer states and the buffers between units.
struct Model::Run {
  const Batch* batch = nullptr;
  Tensor tokens, targets;  // the batch on the model's device
  bool training = false;
  uint32_t microbatch = 0;
  Tensor loss_scale;  // [1]: dL/dloss for the head's backward
  // The same scale for the layers' own loss terms (plx_backward_args.loss_scale, ABI 1.4).
  double loss_scale_value = 1.0;
  std::vector<std::unique_ptr<LayerInstance::State>> states;
  std::vector<std::vector<Tensor>> outputs;      // per unit, allocated at its first stage
  Tensor stream;                                 // the residual stream [B, S, C], or [B*S, n, C] under mHC
  std::vector<MhcSaved> mhc;                     // per unit, under mHC
  Tensor contracted;                             // under mHC: the mean of the streams, the final norm's input
  Tensor summed_grad;                            // under mHC: the streams' gradient summed, the embedding's
  Tensor grad;                                   // its gradient, during backward
  std::vector<Tensor> grad_inputs;               // per unit: the gradient a unit writes
  std::vector<WeightGrads> weights;              // per unit
  uint32_t forward_unit = 0, forward_stage = 0;  // the next forward call expected
  int64_t backward_unit = -1;
  uint32_t backward_stage = 0;
  double loss = 0;
  bool finished_forward = false;
};

// The mHC connection's steps, called by the model at the boundaries of a decoder unit
// (framework/src/engine/model_mhc.cpp).
struct MhcStep {
  // Before the unit's first forward stage: proj_rms, mappings and aggregate on the stream;
  // returns F's input u [B, S, C].
  static const Tensor& before_forward(Model& m, Model::Run& run, uint32_t unit);
  // After its last forward stage: post_res makes the new stream from F's output.
  static void after_forward(Model& m, Model::Run& run, uint32_t unit, Tensor f);
  // Before its first backward stage: post_res backward; returns df, F's upstream gradient.
  static const Tensor& before_backward(Model& m, Model::Run& run, uint32_t unit);
  // After its last backward stage (du is F's input gradient): aggregate, mappings and
  // proj_rms backward; the stream's gradient becomes run.grad.
  static void after_backward(Model& m, Model::Run& run, uint32_t unit, Tensor du);
  // The embedding's output copied into every stream, and its adjoint.
  static void expand(Model& m, Model::Run& run, const Tensor& embedded);
  static Tensor embedding_grad(Model& m, Model::Run& run);
  // The final norm's input (mean of the streams), and its adjoint into run.grad.
  static const Tensor& contract(Model& m, Model::Run& run);
  static void spread(Model& m, Model::Run& run, const Tensor& grad);
};

}  // namespace plexus
