// The checks of cuda_layer.hpp.
#include "cuda/cuda_layer.hpp"

namespace plexus::transformer::cuda {

DLDataType dtype_of(Act act) {
  return act == Act::bf16 ? plx_dtype_bf16() : plx_dtype_f32();
}

const char* act_name(Act act) {
  return act == Act::bf16 ? "bfloat16" : "float32";
}

Act act_of(DLDataType dtype, const std::string& what) {
  if (plx_dtype_equal(dtype, plx_dtype_f32())) return Act::f32;
  if (plx_dtype_equal(dtype, plx_dtype_bf16())) return Act::bf16;
  throw Error(PLX_ERR_INVALID_ARGUMENT,
              what +
                  ": expected dtype float32 or bfloat16 (on a CUDA device the layers "
                  "run in float32 or bfloat16; float64 runs on the CPU), got " +
                  plexus::sdk::dtype_name(dtype));
}

void ForwardRecord::expect(int64_t b, int64_t s, Act backward_act) const {
  // Not saved: expect_saved's message (PLX_FORWARD_TRAINING) comes first, as on the CPU.
  if (saved && backward_act != act)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string("backward in ") + act_name(backward_act) + " after a forward in " +
                    act_name(act) + " (the state keeps the forward's tensors in " + act_name(act) + ")");
  expect_saved(saved, Precision::f32, Precision::f32, batch, seq, b, s);
}

void expect_params_f32(const LayerSpec& spec, const DLTensor* params, const DLTensor* grads) {
  // The CPU path's message would call float32 "the activations' dtype", which bf16 activations
  // are not: say what the rule is here.
  for (std::size_t i = 0; i < spec.params.size(); ++i)
    if (params[i].data != nullptr && !plx_dtype_equal(params[i].dtype, plx_dtype_f32()))
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string("parameter ") + spec.params[i].name +
                                                ": expected dtype float32 (on a CUDA device parameters are "
                                                "float32 whatever the activations' dtype), got " +
                                                plexus::sdk::dtype_name(params[i].dtype));
  expect_params(spec.params, params, grads, plx_dtype_f32(), spec.device);
}

template <class T>
HiddenGrads<T> expect_hidden_backward(const LayerSpec& spec, int64_t hidden, const ForwardRecord& record,
                                      const plx_backward_args& args) {
  const DLDataType dt = dtype_v<T>();
  HiddenGrads<T> g;
  const DLTensor& dy = args.grad_outputs[0];
  expect_hidden(dy, spec.device, dt, hidden, "grad output 0", g.batch, g.seq);
  record.expect(g.batch, g.seq, act_v<T>);
  const DLTensor& dx = args.grad_inputs[0];
  if (dx.data != nullptr) {
    expect_tensor(dx, spec.device, dt, {g.batch, g.seq, hidden}, "grad input 0");
    g.dx = data<T>(dx);
  }
  expect_params_f32(spec, args.params, args.param_grads);
  g.dy = data<T>(dy);
  return g;
}
template HiddenGrads<float> expect_hidden_backward<float>(const LayerSpec&, int64_t, const ForwardRecord&,
                                                          const plx_backward_args&);
template HiddenGrads<ck::bfloat16> expect_hidden_backward<ck::bfloat16>(const LayerSpec&, int64_t,
                                                                        const ForwardRecord&,
                                                                        const plx_backward_args&);

}  // namespace plexus::transformer::cuda
