/* fixture_missing_function: a layer ("fixture.incomplete") whose table has forward = NULL.
 *
 * Exercises table validation at load time: forward is required, so the host must refuse the
 * plugin, naming the component and the missing function, instead of crashing on the first call. */
#include "scale_layer.h"

static const plx_layer_v1 incomplete_table = {
    .struct_size = sizeof(plx_layer_v1),
    .create = fixture_scale_create,
    .destroy = fixture_scale_destroy,
    .get_info = fixture_scale_get_info,
    .get_param = fixture_scale_get_param,
    .get_stage = fixture_scale_get_stage,
    .output_desc = fixture_scale_output_desc,
    .state_create = fixture_scale_state_create,
    .state_destroy = fixture_scale_state_destroy,
    /* forward: required, deliberately missing */
    .backward = fixture_scale_backward,
};

static const plx_component_desc incomplete_component = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_LAYER,
    .name = "fixture.incomplete",
    .description = "a layer without forward",
    .table = &incomplete_table,
};
static const plx_component_desc* const components[] = {&incomplete_component};

static const plx_plugin_descriptor descriptor = {
    sizeof(plx_plugin_descriptor), PLX_ABI_VERSION, 0, 1, "fixture_missing_function", "0.3.0",
    "Its layer has no forward", components, fixture_scale_init, NULL,
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host;
  *out = &descriptor;
  return PLX_OK;
}
