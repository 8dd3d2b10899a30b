/* fixture_bad_model_schema: a stack whose model schema names a component kind this host does not
 * know ("lyer"). The host must refuse the plugin when it loads, naming the component and the place
 * in the schema, rather than when a config is checked. Its functions are never called. */
#include <stddef.h>

#include "plexus/plexus.h"

static plx_status never_create(const plx_stack_create_args* args, void** out_stack) {
  (void)args;
  *out_stack = NULL;
  return PLX_ERR_INTERNAL;
}
static void never_destroy(void* stack) {
  (void)stack;
}
static plx_status never_describe(void* stack, const plx_stack_description** out) {
  (void)stack;
  *out = NULL;
  return PLX_ERR_INTERNAL;
}

static const plx_stack_v1 table = {
    .struct_size = sizeof(plx_stack_v1),
    .create = never_create,
    .destroy = never_destroy,
    .describe = never_describe,
};

static const plx_component_desc component = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_STACK,
    .name = "fixture.bad_model_schema",
    .description = "a stack whose model schema is wrong",
    .table = &table,
    .model_schema =
        "{\"type\": \"object\", \"properties\": {\"block\": {\"type\": \"object\", \"component_kind\": "
        "\"lyer\", \"properties\": {\"component\": {\"type\": \"string\"}, \"options\": {\"type\": "
        "\"object\"}}}}}",
};
static const plx_component_desc* const components[] = {&component};

static const plx_plugin_descriptor descriptor = {
    .struct_size = sizeof(plx_plugin_descriptor),
    .abi_version = PLX_ABI_VERSION,
    .min_host_minor = 3,
    .component_count = 1,
    .name = "fixture_bad_model_schema",
    .version = "0.1.0",
    .description = "A stack with an invalid model schema",
    .components = components,
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host;
  *out = &descriptor;
  return PLX_OK;
}
