/* fixture_init_fails: a valid plugin whose init refuses to start, with its own message.
 *
 * Exercises the init contract: a non-OK status from init (after set_error) refuses the plugin;
 * the host must show the plugin's message and leave none of its components ("fixture.licensed")
 * registered. */
#include "scale_layer.h"

static plx_status refuse(const plx_host_api* host) {
  host->set_error(host->ctx, PLX_ERR_INVALID_ARGUMENT, "fixture init refuses: missing license key");
  return PLX_ERR_INVALID_ARGUMENT;
}

static const plx_component_desc licensed_component = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_LAYER,
    .name = "fixture.licensed",
    .description = "the scale layer, behind a license",
    .table = &fixture_scale_layer,
};
static const plx_component_desc* const components[] = {&licensed_component};

static const plx_plugin_descriptor descriptor = {
    sizeof(plx_plugin_descriptor), PLX_ABI_VERSION, 0, 1, "fixture_init_fails", "0.3.0",
    "Refuses to initialize", components, refuse, NULL,
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host;
  *out = &descriptor;
  return PLX_OK;
}
