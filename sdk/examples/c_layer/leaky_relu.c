/* example.c_leaky_relu: y = x for x > 0, negative_slope * x otherwise; fp32 CPU tensors.
 *
 * A complete layer in plain C99 against the SDK's C ABI, without the C++ helpers. It shows what
 * the helpers otherwise do for you:
 *   - the plx_layer_v1 function table and the plugin descriptor as static data,
 *   - keeping the host table handed to the entry point,
 *   - reporting every error through host->set_error before returning a non-OK status,
 *   - writing caller-sized "out" structs only up to the caller's struct_size,
 *   - per-microbatch state for backward, with memory from the host's allocator.
 * The layer has no parameters; its one option, negative_slope, comes from its config. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plexus/plexus.h"

/* The host table this library was handed. One library is one plugin, so a file-level static is
 * private to it (it exports nothing but the entry point). */
static const plx_host_api* g_host = NULL;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static plx_status fail(plx_status status, const char* format, ...) {
  /* The host copies the message and prefixes the plugin's and component's names. */
  char message[512];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  if (g_host != NULL && g_host->set_error != NULL) g_host->set_error(g_host->ctx, status, message);
  return status;
}

/* Copies a fully built struct into a caller-sized one: an older host passes a smaller
 * struct_size and must never have fields written past it. */
static plx_status write_out(void* out, const void* value, size_t size, const char* what) {
  uint32_t caller_size, written;
  if (out == NULL) return fail(PLX_ERR_INVALID_ARGUMENT, "%s: null output struct", what);
  memcpy(&caller_size, out, sizeof caller_size); /* every out struct starts with struct_size */
  if (caller_size < sizeof(uint32_t))
    return fail(PLX_ERR_INVALID_ARGUMENT, "%s: output struct_size not set", what);
  if (caller_size < size) size = caller_size;
  memcpy(out, value, size);
  written = (uint32_t)size; /* struct_size then says how much of the struct was filled */
  memcpy(out, &written, sizeof written);
  return PLX_OK;
}

static plx_status check_tensor(const DLTensor* t, const char* what) {
  if (t->device.device_type != kDLCPU) return fail(PLX_ERR_UNSUPPORTED, "%s: expected a CPU tensor", what);
  if (!plx_dtype_equal(t->dtype, plx_dtype_f32()))
    return fail(PLX_ERR_INVALID_ARGUMENT, "%s: expected dtype float32, got code %u with %u bits", what,
                (unsigned)t->dtype.code, (unsigned)t->dtype.bits);
  if (!plx_is_contiguous(t)) return fail(PLX_ERR_INVALID_ARGUMENT, "%s: expected a contiguous tensor", what);
  return PLX_OK;
}

static int same_shape(const DLTensor* a, const DLTensor* b) {
  int i;
  if (a->ndim != b->ndim) return 0;
  for (i = 0; i < a->ndim; ++i)
    if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}

typedef struct leaky_relu {
  float negative_slope;
} leaky_relu;

/* What a training forward keeps for backward: which inputs were positive. */
typedef struct leaky_relu_state {
  uint8_t* positive; /* from the host allocator; NULL until a training forward */
  int64_t count;
} leaky_relu_state;

static const DLDevice kCpu = {kDLCPU, 0};

static plx_status lr_create(const plx_layer_create_args* args, void** out_layer) {
  double slope = 0.0;
  plx_status status;
  leaky_relu* layer;
  if (args == NULL || out_layer == NULL) return fail(PLX_ERR_INVALID_ARGUMENT, "create: null argument");
  if (args->device.device_type != kDLCPU)
    return fail(PLX_ERR_UNSUPPORTED, "example.c_leaky_relu runs on the CPU only");
  /* The host validated the config against kConfigSchema and filled in the default, so the key is
   * always there; on failure the host already set a message naming the config path. */
  status = g_host->config_get_number(g_host->ctx, args->config, "negative_slope", &slope);
  if (status != PLX_OK) return status;
  layer = (leaky_relu*)malloc(sizeof *layer);
  if (layer == NULL) return fail(PLX_ERR_OUT_OF_MEMORY, "create: out of memory");
  layer->negative_slope = (float)slope;
  *out_layer = layer;
  return PLX_OK;
}

static void lr_destroy(void* layer) { free(layer); }

static plx_status lr_get_info(void* layer, plx_layer_info* out) {
  plx_layer_info info;
  (void)layer;
  memset(&info, 0, sizeof info);
  info.struct_size = (uint32_t)sizeof info;
  info.num_params = 0;
  info.num_stages = 1;
  info.num_inputs = 1;
  info.num_outputs = 1;
  return write_out(out, &info, sizeof info, "get_info");
}

static plx_status lr_get_param(void* layer, uint32_t index, plx_param_spec* out) {
  (void)layer;
  (void)out;
  return fail(PLX_ERR_INVALID_ARGUMENT, "get_param: example.c_leaky_relu has no parameters (asked for %u)",
              (unsigned)index);
}

static plx_status lr_get_stage(void* layer, uint32_t index, plx_stage_info* out) {
  plx_stage_info stage;
  (void)layer;
  if (index != 0) return fail(PLX_ERR_INVALID_ARGUMENT, "get_stage: no stage %u", (unsigned)index);
  memset(&stage, 0, sizeof stage);
  stage.struct_size = (uint32_t)sizeof stage;
  stage.kind = PLX_STAGE_COMPUTE;
  stage.name = "compute";
  return write_out(out, &stage, sizeof stage, "get_stage");
}

static plx_status lr_output_desc(void* layer, uint32_t num_inputs, const plx_tensor_desc* inputs,
                                 uint32_t num_outputs, plx_tensor_desc* outputs) {
  (void)layer;
  if (num_inputs != 1 || num_outputs != 1)
    return fail(PLX_ERR_INVALID_ARGUMENT, "output_desc: expected 1 input and 1 output, got %u and %u",
                (unsigned)num_inputs, (unsigned)num_outputs);
  if (!plx_dtype_equal(inputs[0].dtype, plx_dtype_f32()))
    return fail(PLX_ERR_INVALID_ARGUMENT, "output_desc: input 0 must be float32");
  outputs[0] = inputs[0]; /* elementwise: same shape and dtype */
  return PLX_OK;
}

static plx_status lr_state_create(void* layer, uint32_t microbatch, void** out_state) {
  leaky_relu_state* state;
  (void)layer;
  (void)microbatch;
  state = (leaky_relu_state*)calloc(1, sizeof *state);
  if (state == NULL) return fail(PLX_ERR_OUT_OF_MEMORY, "state_create: out of memory");
  *out_state = state;
  return PLX_OK;
}

static void release_mask(leaky_relu_state* state) {
  if (state->positive != NULL) g_host->free(g_host->ctx, kCpu, state->positive);
  state->positive = NULL;
  state->count = 0;
}

static void lr_state_destroy(void* layer, void* state) {
  (void)layer;
  if (state == NULL) return;
  release_mask((leaky_relu_state*)state);
  free(state);
}

static plx_status lr_forward(void* layer_ptr, void* state_ptr, uint32_t stage, const plx_forward_args* args) {
  const leaky_relu* layer = (const leaky_relu*)layer_ptr;
  leaky_relu_state* state = (leaky_relu_state*)state_ptr;
  const float* x;
  float* y;
  int64_t n, i;
  plx_status status;
  if (stage != 0) return fail(PLX_ERR_INVALID_ARGUMENT, "forward: no stage %u", (unsigned)stage);
  if (args->num_inputs != 1 || args->num_outputs != 1)
    return fail(PLX_ERR_INVALID_ARGUMENT, "forward: expected 1 input and 1 output, got %u and %u",
                (unsigned)args->num_inputs, (unsigned)args->num_outputs);
  if ((status = check_tensor(&args->inputs[0], "forward: input 0")) != PLX_OK) return status;
  if ((status = check_tensor(&args->outputs[0], "forward: output 0")) != PLX_OK) return status;
  if (!same_shape(&args->inputs[0], &args->outputs[0]))
    return fail(PLX_ERR_INVALID_ARGUMENT, "forward: input 0 and output 0 differ in shape");
  n = plx_numel(&args->inputs[0]);
  x = (const float*)plx_data(&args->inputs[0]);
  y = (float*)plx_data(&args->outputs[0]);

  /* Only a training forward pays for keeping the mask; the buffer is reused while the size fits. */
  if ((args->flags & PLX_FORWARD_TRAINING) != 0) {
    if (state->positive == NULL || state->count != n) {
      void* mask = NULL;
      release_mask(state);
      status = g_host->alloc(g_host->ctx, kCpu, (uint64_t)(n > 0 ? n : 1), 0, &mask);
      if (status != PLX_OK) return status; /* the host's allocator set the message */
      state->positive = (uint8_t*)mask;
    }
    state->count = n;
  } else {
    release_mask(state);
  }
  for (i = 0; i < n; ++i) {
    const int positive = x[i] > 0.0f;
    y[i] = positive ? x[i] : layer->negative_slope * x[i];
    if (state->positive != NULL) state->positive[i] = (uint8_t)positive;
  }
  return PLX_OK;
}

static plx_status lr_backward(void* layer_ptr, void* state_ptr, uint32_t stage, const plx_backward_args* args) {
  const leaky_relu* layer = (const leaky_relu*)layer_ptr;
  const leaky_relu_state* state = (const leaky_relu_state*)state_ptr;
  const float* dy;
  float* dx;
  int64_t n, i;
  plx_status status;
  if (stage != 0) return fail(PLX_ERR_INVALID_ARGUMENT, "backward: no stage %u", (unsigned)stage);
  if (args->num_inputs != 1 || args->num_outputs != 1)
    return fail(PLX_ERR_INVALID_ARGUMENT, "backward: expected 1 input and 1 output, got %u and %u",
                (unsigned)args->num_inputs, (unsigned)args->num_outputs);
  if (state->positive == NULL)
    return fail(PLX_ERR_INVALID_ARGUMENT, "backward: no training forward ran for this microbatch state");
  if (args->grad_inputs[0].data == NULL) return PLX_OK; /* nobody needs the input gradient */
  if ((status = check_tensor(&args->grad_outputs[0], "backward: grad output 0")) != PLX_OK) return status;
  if ((status = check_tensor(&args->grad_inputs[0], "backward: grad input 0")) != PLX_OK) return status;
  n = plx_numel(&args->grad_outputs[0]);
  if (n != state->count || !same_shape(&args->grad_outputs[0], &args->grad_inputs[0]))
    return fail(PLX_ERR_INVALID_ARGUMENT,
                "backward: gradients have %" PRId64 " elements (grad input shape must match), forward saw %" PRId64,
                n, state->count);
  dy = (const float*)plx_data(&args->grad_outputs[0]);
  dx = (float*)plx_data(&args->grad_inputs[0]);
  for (i = 0; i < n; ++i) dx[i] = state->positive[i] ? dy[i] : layer->negative_slope * dy[i];
  return PLX_OK;
}

static const plx_layer_v1 kLeakyReluTable = {
    .struct_size = (uint32_t)sizeof(plx_layer_v1),
    .create = lr_create,
    .destroy = lr_destroy,
    .get_info = lr_get_info,
    .get_param = lr_get_param,
    .get_stage = lr_get_stage,
    .output_desc = lr_output_desc,
    /* init_param: none, no parameters */
    .state_create = lr_state_create,
    .state_destroy = lr_state_destroy,
    .forward = lr_forward,
    .backward = lr_backward,
    /* backward_weights: none, no weights */
};

/* Validated by the host: a missing negative_slope gets the default, a negative one is refused
 * with a message naming the config path. Plexus schemas use "doc"; unknown keys are errors. */
static const char kConfigSchema[] =
    "{\"type\": \"object\","
    " \"doc\": \"leaky ReLU: y = x for x > 0, negative_slope * x otherwise\","
    " \"properties\": {"
    "   \"negative_slope\": {\"type\": \"number\", \"default\": 0.01, \"minimum\": 0,"
    "                        \"doc\": \"slope for x <= 0 (0 gives a plain ReLU)\"}}}";

/* Designated initializers: fields a newer SDK appends (model_schema in 1.6) stay NULL silently. */
static const plx_component_desc kLeakyRelu = {
    .struct_size = (uint32_t)sizeof(plx_component_desc),
    .kind = PLX_KIND_LAYER,
    .name = "example.c_leaky_relu",
    .description = "leaky ReLU written in plain C (fp32, CPU)",
    .config_schema = kConfigSchema,
    .table = &kLeakyReluTable,
};

static const plx_component_desc* const kComponents[] = {&kLeakyRelu};

/* init runs once the host accepted the descriptor; it hands over the table to keep for good. */
static plx_status plugin_init(const plx_host_api* host) {
  g_host = host;
  return PLX_OK;
}

static const plx_plugin_descriptor kDescriptor = {
    (uint32_t)sizeof(plx_plugin_descriptor),
    PLX_ABI_VERSION,
    0, /* min_host_minor: needs nothing newer than ABI 1.0 */
    (uint32_t)(sizeof kComponents / sizeof kComponents[0]),
    "example_c",
    "1.0.0",
    "Example out-of-tree C plugin: a leaky ReLU layer",
    kComponents,
    plugin_init,
    NULL, /* shutdown: nothing to release */
};

/* The entry must be cheap and side-effect free (`plexus plugins list` calls it). It returns the
 * descriptor whatever the host's version: the host decides compatibility and names both
 * versions in its message. The table is kept only when its layout is one this plugin knows. */
PLX_PLUGIN_ENTRY(host, out) {
  if (out == NULL) return PLX_ERR_INVALID_ARGUMENT;
  if (host != NULL && PLX_VERSION_MAJOR(host->abi_version) == PLX_ABI_MAJOR) g_host = host;
  *out = &kDescriptor;
  return PLX_OK;
}
