/* fixture_c_layer: the known-good plugin, written in plain C99 against the current SDK.
 *
 * Exercises the C side of the ABI end to end: a layer ("fixture.c_scale", y = w * x, from
 * scale_layer.c) that reports errors through host->set_error, and a scheduler
 * ("fixture.c_sequential") that drives plx_schedule_env's callbacks. The error tests also load it
 * after each refused plugin to show that the host is still running. */
#include "scale_layer.h"

#include <stdlib.h>

/* ---- fixture.c_sequential: plain gradient accumulation ----------------------------------------
 * Microbatch by microbatch: forward through every unit's stages in order, then backward through
 * the units in reverse (stages reversed too). Communication stages go on the comm stream. */

/* Stateless, but the ABI wants an object per instance; a byte is enough. */
static plx_status sequential_create(plx_config config, void** out_scheduler) {
  (void)config;
  *out_scheduler = malloc(1);
  if (*out_scheduler == NULL) return fixture_fail(PLX_ERR_OUT_OF_MEMORY, "create: out of memory");
  return PLX_OK;
}

static void sequential_destroy(void* scheduler) { free(scheduler); }

/* The stream a stage runs on: the comm stream for communication, the compute stream otherwise. */
static plx_status stage_stream(const plx_schedule_env* env, uint32_t unit, uint32_t stage, plx_stream* out) {
  plx_stage_info info;
  plx_status status = PLX_OK;
  info.struct_size = sizeof info;
  status = env->unit_stage(env->ctx, unit, stage, &info);
  if (status != PLX_OK) return status; /* the engine reported it */
  *out = info.kind == PLX_STAGE_COMM ? env->comm_stream : env->compute_stream;
  return PLX_OK;
}

static plx_status run_microbatch(const plx_schedule_env* env, uint32_t mb) {
  uint32_t unit = 0;
  uint32_t stages = 0;
  uint32_t s = 0;
  plx_stream stream = NULL;
  plx_status status = PLX_OK;

  for (unit = 0; unit < env->num_units; ++unit) {
    if ((status = env->unit_num_stages(env->ctx, unit, &stages)) != PLX_OK) return status;
    for (s = 0; s < stages; ++s) {
      if ((status = stage_stream(env, unit, s, &stream)) != PLX_OK) return status;
      if ((status = env->forward(env->ctx, mb, unit, s, stream)) != PLX_OK) return status;
    }
  }
  for (unit = env->num_units; unit-- > 0;) {
    if ((status = env->unit_num_stages(env->ctx, unit, &stages)) != PLX_OK) return status;
    for (s = stages; s-- > 0;) {
      if ((status = stage_stream(env, unit, s, &stream)) != PLX_OK) return status;
      if ((status = env->backward(env->ctx, mb, unit, s, stream)) != PLX_OK) return status;
    }
    /* When the engine split weight gradients off, a sequential schedule has no gap to fill
     * with them: do them right away. */
    if (env->backward_weights != NULL &&
        (status = env->backward_weights(env->ctx, mb, unit, env->compute_stream)) != PLX_OK)
      return status;
  }
  return PLX_OK;
}

static plx_status sequential_run_step(void* scheduler, const plx_schedule_env* env) {
  uint32_t mb = 0;
  plx_status status = PLX_OK;
  (void)scheduler;
  for (mb = 0; mb < env->num_microbatches; ++mb)
    if ((status = run_microbatch(env, mb)) != PLX_OK) return status;
  return PLX_OK;
}

static const plx_scheduler_v1 sequential_table = {
    sizeof(plx_scheduler_v1), 0, sequential_create, sequential_destroy, sequential_run_step};

/* ---- the descriptor --------------------------------------------------------------------------- */

static const plx_component_desc scale_component = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_LAYER,
    .name = "fixture.c_scale",
    .description = "y = w * x, written in C",
    .table = &fixture_scale_layer,
};
static const plx_component_desc sequential_component = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_SCHEDULER,
    .name = "fixture.c_sequential",
    .description = "each microbatch forward then backward, written in C",
    .table = &sequential_table,
};
static const plx_component_desc* const components[] = {&scale_component, &sequential_component};

static const plx_plugin_descriptor descriptor = {
    sizeof(plx_plugin_descriptor),
    PLX_ABI_VERSION,
    0, /* needs nothing newer than 1.0 */
    sizeof components / sizeof components[0],
    "fixture_c_layer",
    "0.3.0",
    "A plain C plugin: a layer and a scheduler",
    components,
    fixture_scale_init,
    NULL,
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host; /* the host decides compatibility from the descriptor */
  *out = &descriptor;
  return PLX_OK;
}
