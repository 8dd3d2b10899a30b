/* The scale layer shared by the C fixtures (see scale_layer.h): y = w * x. ABI 1.0 only. */
#include "scale_layer.h"

#include <stdlib.h>
#include <string.h>

/* The table handed to init. One copy per plugin library: this file is linked into each. */
static const plx_host_api* g_host = NULL;

plx_status fixture_scale_init(const plx_host_api* host) {
  g_host = host;
  return PLX_OK;
}

plx_status fixture_fail(plx_status status, const char* message) {
  if (g_host != NULL) g_host->set_error(g_host->ctx, status, message);
  return status;
}

plx_status fixture_copy_out(void* out, const void* value, size_t size) {
  uint32_t caller_size = 0;
  uint32_t written = 0;
  if (out == NULL) return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "null output struct");
  memcpy(&caller_size, out, sizeof caller_size);
  if (caller_size < sizeof caller_size)
    return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "output struct_size not set");
  written = caller_size < size ? caller_size : (uint32_t)size;
  memcpy(out, value, written);
  memcpy(out, &written, sizeof written); /* struct_size says how much of it we filled */
  return PLX_OK;
}

/* The layer keeps nothing but where it runs: its weight is host-owned and passed to each call. */
typedef struct scale_layer {
  DLDevice device;
} scale_layer;

/* What backward needs from forward, per microbatch: a copy of x. */
typedef struct scale_state {
  int saved; /* a training forward ran */
  float* saved_x;
  int64_t count;
} scale_state;

plx_status fixture_scale_create(const plx_layer_create_args* args, void** out_layer) {
  scale_layer* layer = NULL;
  if (args == NULL || out_layer == NULL) return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "create: null argument");
  if (args->device.device_type != kDLCPU)
    return fixture_fail(PLX_ERR_UNSUPPORTED, "create: the scale layer runs on the CPU only");
  layer = (scale_layer*)malloc(sizeof *layer);
  if (layer == NULL) return fixture_fail(PLX_ERR_OUT_OF_MEMORY, "create: out of memory");
  layer->device = args->device;
  *out_layer = layer;
  return PLX_OK;
}

void fixture_scale_destroy(void* layer) { free(layer); }

plx_status fixture_scale_get_info(void* layer, plx_layer_info* out) {
  plx_layer_info info;
  (void)layer;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.num_params = 1;
  info.num_stages = 1;
  info.num_inputs = 1;
  info.num_outputs = 1;
  return fixture_copy_out(out, &info, sizeof info);
}

plx_status fixture_scale_get_param(void* layer, uint32_t index, plx_param_spec* out) {
  plx_param_spec spec;
  (void)layer;
  if (index != 0) return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "get_param: the only parameter is index 0");
  memset(&spec, 0, sizeof spec);
  spec.struct_size = sizeof spec;
  spec.name = "weight";
  spec.desc.ndim = 1;
  spec.desc.dtype = plx_dtype_f32();
  spec.desc.dims[0] = 1;
  spec.init = PLX_INIT_ONES;
  return fixture_copy_out(out, &spec, sizeof spec);
}

plx_status fixture_scale_get_stage(void* layer, uint32_t index, plx_stage_info* out) {
  plx_stage_info stage;
  (void)layer;
  if (index != 0) return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "get_stage: the only stage is index 0");
  memset(&stage, 0, sizeof stage);
  stage.struct_size = sizeof stage;
  stage.kind = PLX_STAGE_COMPUTE;
  stage.name = "scale";
  return fixture_copy_out(out, &stage, sizeof stage);
}

plx_status fixture_scale_output_desc(void* layer, uint32_t num_inputs, const plx_tensor_desc* inputs,
                                     uint32_t num_outputs, plx_tensor_desc* outputs) {
  (void)layer;
  if (num_inputs != 1 || num_outputs != 1)
    return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "output_desc: expected 1 input and 1 output");
  if (!plx_dtype_equal(inputs[0].dtype, plx_dtype_f32()))
    return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "output_desc: input 0 must be float32");
  outputs[0] = inputs[0]; /* elementwise: same shape and dtype */
  return PLX_OK;
}

plx_status fixture_scale_state_create(void* layer, uint32_t microbatch, void** out_state) {
  scale_state* state = NULL;
  (void)layer;
  (void)microbatch;
  state = (scale_state*)calloc(1, sizeof *state);
  if (state == NULL) return fixture_fail(PLX_ERR_OUT_OF_MEMORY, "state_create: out of memory");
  *out_state = state;
  return PLX_OK;
}

void fixture_scale_state_destroy(void* layer, void* state) {
  (void)layer;
  if (state != NULL) free(((scale_state*)state)->saved_x);
  free(state);
}

/* Non-zero when t is a contiguous fp32 tensor in CPU memory: all this layer computes on. */
static int is_cpu_f32(const DLTensor* t) {
  return t->data != NULL && t->device.device_type == kDLCPU && plx_dtype_equal(t->dtype, plx_dtype_f32()) &&
         plx_is_contiguous(t);
}

plx_status fixture_scale_forward(void* layer, void* state_ptr, uint32_t stage, const plx_forward_args* args) {
  scale_state* state = (scale_state*)state_ptr;
  const float* x = NULL;
  float* y = NULL;
  float w = 0.0f;
  int64_t i = 0;
  int64_t n = 0;
  (void)layer;
  if (stage != 0) return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "forward: the only stage is 0");
  if (args->num_inputs != 1 || args->num_outputs != 1 || args->num_params != 1)
    return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "forward: expected 1 input, 1 output and 1 parameter");
  if (!is_cpu_f32(&args->inputs[0]) || !is_cpu_f32(&args->outputs[0]) || !is_cpu_f32(&args->params[0]))
    return fixture_fail(PLX_ERR_INVALID_ARGUMENT,
                        "forward: input, output and weight must be contiguous float32 CPU tensors");
  n = plx_numel(&args->inputs[0]);
  if (plx_numel(&args->outputs[0]) != n || plx_numel(&args->params[0]) != 1)
    return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "forward: output must match the input and weight must be [1]");
  x = (const float*)plx_data(&args->inputs[0]);
  y = (float*)plx_data(&args->outputs[0]);
  w = *(const float*)plx_data(&args->params[0]);
  for (i = 0; i < n; ++i) y[i] = w * x[i];

  if ((args->flags & PLX_FORWARD_TRAINING) != 0) {
    float* saved = (float*)realloc(state->saved_x, (size_t)(n > 0 ? n : 1) * sizeof *saved);
    if (saved == NULL) return fixture_fail(PLX_ERR_OUT_OF_MEMORY, "forward: out of memory saving x");
    memcpy(saved, x, (size_t)n * sizeof *saved);
    state->saved = 1;
    state->saved_x = saved;
    state->count = n;
  }
  return PLX_OK;
}

plx_status fixture_scale_backward(void* layer, void* state_ptr, uint32_t stage, const plx_backward_args* args) {
  const scale_state* state = (const scale_state*)state_ptr;
  const float* dy = NULL;
  float w = 0.0f;
  float dw = 0.0f;
  int64_t i = 0;
  (void)layer;
  if (stage != 0) return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "backward: the only stage is 0");
  if (args->num_outputs != 1 || args->num_inputs != 1 || args->num_params != 1)
    return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "backward: expected 1 output, 1 input and 1 parameter");
  if (!state->saved)
    return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "backward: no training forward ran for this microbatch");
  if (!is_cpu_f32(&args->grad_outputs[0]) || !is_cpu_f32(&args->params[0]) || !is_cpu_f32(&args->param_grads[0]))
    return fixture_fail(PLX_ERR_INVALID_ARGUMENT,
                        "backward: grad output, weight and weight grad must be contiguous float32 CPU tensors");
  if (plx_numel(&args->grad_outputs[0]) != state->count)
    return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "backward: grad output does not match the forward's input");
  dy = (const float*)plx_data(&args->grad_outputs[0]);
  w = *(const float*)plx_data(&args->params[0]);

  /* dx is written (an entry with NULL data needs no gradient); dw is accumulated into. */
  if (args->grad_inputs[0].data != NULL) {
    float* dx = NULL;
    if (!is_cpu_f32(&args->grad_inputs[0]) || plx_numel(&args->grad_inputs[0]) != state->count)
      return fixture_fail(PLX_ERR_INVALID_ARGUMENT, "backward: grad input must be float32 and match the input");
    dx = (float*)plx_data(&args->grad_inputs[0]);
    for (i = 0; i < state->count; ++i) dx[i] = w * dy[i];
  }
  for (i = 0; i < state->count; ++i) dw += state->saved_x[i] * dy[i];
  *(float*)plx_data(&args->param_grads[0]) += dw;
  return PLX_OK;
}

const plx_layer_v1 fixture_scale_layer = {
    .struct_size = sizeof(plx_layer_v1),
    .create = fixture_scale_create,
    .destroy = fixture_scale_destroy,
    .get_info = fixture_scale_get_info,
    .get_param = fixture_scale_get_param,
    .get_stage = fixture_scale_get_stage,
    .output_desc = fixture_scale_output_desc,
    /* init_param: none, the weight uses PLX_INIT_ONES */
    .state_create = fixture_scale_state_create,
    .state_destroy = fixture_scale_state_destroy,
    .forward = fixture_scale_forward,
    .backward = fixture_scale_backward,
    /* backward_weights: none, weight gradients are not split off */
};
