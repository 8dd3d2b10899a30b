/* fixture_c_stack: third-party stacks, written in plain C99 against the current SDK, for the
 * model keys a stack declares (plx_component_desc.model_schema, ABI 1.6).
 *
 * Every component is the same stack: the GPT, model.num_layers x [attention, MLP] of the
 * transformer plugin's layers, each pair one logical layer. They differ only in their descriptors:
 *   fixture.c_stack         a 1.6 stack that declares no model keys (model_schema NULL);
 *   fixture.c_stack_legacy  a stack as an SDK before 1.6 built it: its struct_size ends at `table`;
 *   fixture.c_stack_keys    declares model.depth_note (a string, default "plain") and a component
 *                           section model.block (component_kind "layer", default transformer.mlp);
 *   fixture.c_stack_clash   declares model.hidden_size, which the framework already declares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plexus/plexus.h"

static const plx_host_api* g_host = NULL;

static plx_status fail(plx_status status, const char* message) {
  if (g_host != NULL) g_host->set_error(g_host->ctx, status, message);
  return status;
}

typedef struct gpt_stack {
  uint32_t num_layers; /* logical: physical is twice that */
  char (*prefixes)[32];
  plx_stack_layer* layers;
  const plx_stack_layer** pointers;
  plx_stack_description description;
} gpt_stack;

static void stack_destroy(void* stack) {
  gpt_stack* s = (gpt_stack*)stack;
  if (s == NULL) return;
  free(s->prefixes);
  free(s->layers);
  free((void*)s->pointers);
  free(s);
}

static plx_status stack_create(const plx_stack_create_args* args, void** out_stack) {
  int64_t num_layers = 0;
  gpt_stack* s = NULL;
  uint32_t i = 0;
  plx_status status = g_host->config_get_int(g_host->ctx, args->model_config, "num_layers", &num_layers);
  if (status != PLX_OK) return status; /* the host's message names model.num_layers */
  if (num_layers < 1 || num_layers > 4096)
    return fail(PLX_ERR_INVALID_ARGUMENT, "model.num_layers: out of range");
  s = (gpt_stack*)calloc(1, sizeof *s);
  if (s == NULL) return fail(PLX_ERR_OUT_OF_MEMORY, "create: out of memory");
  s->num_layers = (uint32_t)num_layers;
  s->prefixes = calloc(s->num_layers, sizeof *s->prefixes);
  s->layers = (plx_stack_layer*)calloc(2u * s->num_layers, sizeof *s->layers);
  s->pointers = (const plx_stack_layer**)calloc(2u * s->num_layers, sizeof *s->pointers);
  if (s->prefixes == NULL || s->layers == NULL || s->pointers == NULL) {
    stack_destroy(s);
    return fail(PLX_ERR_OUT_OF_MEMORY, "create: out of memory");
  }
  for (i = 0; i < 2u * s->num_layers; ++i) {
    plx_stack_layer* l = &s->layers[i];
    const int attention = i % 2 == 0;
    if (attention) snprintf(s->prefixes[i / 2], sizeof s->prefixes[i / 2], "decoder.layers.%u.", i / 2);
    l->struct_size = sizeof *l;
    l->physical_index = i;
    l->logical_index = i / 2;
    l->symbol = attention ? "a" : "m";
    l->component = attention ? "transformer.attention" : "transformer.mlp";
    l->options = "{}";
    l->options_path = NULL; /* the engine then names model.stack.options */
    l->checkpoint_prefix = s->prefixes[i / 2];
    l->connection_prefix = attention ? "self_attention_hyper_connection." : "mlp_hyper_connection.";
    l->kind = attention ? "attention" : "mlp";
    s->pointers[i] = l;
  }
  s->description.struct_size = sizeof s->description;
  s->description.num_layers = 2u * s->num_layers;
  s->description.num_logical = s->num_layers;
  s->description.num_segments = 1;
  s->description.layers = s->pointers;
  s->description.final_norm_prefix = "decoder.final_layernorm.";
  s->description.summary = "the C fixture's GPT";
  *out_stack = s;
  return PLX_OK;
}

static plx_status stack_describe(void* stack, const plx_stack_description** out) {
  *out = &((gpt_stack*)stack)->description;
  return PLX_OK;
}

static const plx_stack_v1 stack_table = {
    .struct_size = sizeof(plx_stack_v1),
    .create = stack_create,
    .destroy = stack_destroy,
    .describe = stack_describe,
};

static const char kKeysSchema[] =
    "{\"type\": \"object\", \"properties\": {"
    "  \"depth_note\": {\"type\": \"string\", \"default\": \"plain\", \"doc\": \"read by nobody\"},"
    "  \"block\": {\"type\": \"object\", \"component_kind\": \"layer\", \"properties\": {"
    "    \"component\": {\"type\": \"string\", \"default\": \"transformer.mlp\"},"
    "    \"options\": {\"type\": \"object\", \"additional_properties\": true, \"default\": {}}}}}}";

static const char kClashSchema[] =
    "{\"type\": \"object\", \"properties\": {\"hidden_size\": {\"type\": \"integer\", \"default\": 64}}}";

static const plx_component_desc plain_stack = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_STACK,
    .name = "fixture.c_stack",
    .description = "the GPT, declaring no model keys",
    .table = &stack_table,
};
/* What a plugin built against SDK 1.5 hands over: the host reads no model_schema beyond it. */
static const plx_component_desc legacy_stack = {
    .struct_size = PLX_FIELD_END(plx_component_desc, table),
    .kind = PLX_KIND_STACK,
    .name = "fixture.c_stack_legacy",
    .description = "the GPT, as a stack from before ABI 1.6",
    .table = &stack_table,
};
static const plx_component_desc keys_stack = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_STACK,
    .name = "fixture.c_stack_keys",
    .description = "the GPT, declaring model.depth_note and model.block",
    .table = &stack_table,
    .model_schema = kKeysSchema,
};
static const plx_component_desc clash_stack = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_STACK,
    .name = "fixture.c_stack_clash",
    .description = "the GPT, declaring model.hidden_size again",
    .table = &stack_table,
    .model_schema = kClashSchema,
};
static const plx_component_desc* const components[] = {&plain_stack, &legacy_stack, &keys_stack,
                                                       &clash_stack};

static plx_status init(const plx_host_api* host) {
  g_host = host;
  return PLX_OK;
}

static const plx_plugin_descriptor descriptor = {
    .struct_size = sizeof(plx_plugin_descriptor),
    .abi_version = PLX_ABI_VERSION,
    .min_host_minor = 3, /* stacks */
    .component_count = sizeof components / sizeof components[0],
    .name = "fixture_c_stack",
    .version = "0.1.0",
    .description = "Third-party stacks in plain C, with and without model keys",
    .components = components,
    .init = init,
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host; /* the host decides compatibility from the descriptor */
  *out = &descriptor;
  return PLX_OK;
}
