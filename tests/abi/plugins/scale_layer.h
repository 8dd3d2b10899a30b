/* The scale layer shared by the C fixture plugins: y = w * x elementwise on contiguous fp32 CPU
 * tensors, with one parameter "weight" of shape [1] (initialized to ones by the host), one compute
 * stage, and backward dx = w * dy, dw += sum(x * dy).
 *
 * scale_layer.c is compiled into every fixture that lists it, each time against the headers that
 * fixture is built with (fixture_older_minor uses the frozen 1.0 snapshot), so it must only use
 * what ABI 1.0 has. Nothing here is exported: each plugin exports only its entry point. */
#ifndef PLEXUS_TESTS_ABI_SCALE_LAYER_H
#define PLEXUS_TESTS_ABI_SCALE_LAYER_H

#include "plexus/plexus.h"

/* A descriptor's `init`: keeps the host table so errors can be reported through set_error. */
plx_status fixture_scale_init(const plx_host_api* host);

/* The complete plx_layer_v1 table, for fixtures that use the layer as it is. */
extern const plx_layer_v1 fixture_scale_layer;

/* Its functions, for fixtures that build a table of their own (a larger future layout, or one
 * with a function missing). */
plx_status fixture_scale_create(const plx_layer_create_args* args, void** out_layer);
void fixture_scale_destroy(void* layer);
plx_status fixture_scale_get_info(void* layer, plx_layer_info* out);
plx_status fixture_scale_get_param(void* layer, uint32_t index, plx_param_spec* out);
plx_status fixture_scale_get_stage(void* layer, uint32_t index, plx_stage_info* out);
plx_status fixture_scale_output_desc(void* layer, uint32_t num_inputs, const plx_tensor_desc* inputs,
                                     uint32_t num_outputs, plx_tensor_desc* outputs);
plx_status fixture_scale_state_create(void* layer, uint32_t microbatch, void** out_state);
void fixture_scale_state_destroy(void* layer, void* state);
plx_status fixture_scale_forward(void* layer, void* state, uint32_t stage, const plx_forward_args* args);
plx_status fixture_scale_backward(void* layer, void* state, uint32_t stage, const plx_backward_args* args);

/* Copies `value` (`size` bytes, a struct starting with struct_size) into a caller-sized out
 * struct: at most the caller's struct_size bytes are written, so a caller built with an older,
 * smaller layout is never overrun. */
plx_status fixture_copy_out(void* out, const void* value, size_t size);

/* Reports `message` through the host's set_error and returns `status`. */
plx_status fixture_fail(plx_status status, const char* message);

#endif /* PLEXUS_TESTS_ABI_SCALE_LAYER_H */
