/* fixture_dup_a: registers the layer "fixture.dup", which fixture_dup_b registers too.
 *
 * Exercises duplicate detection (with fixture_dup_b): loaded first, this plugin wins; when
 * fixture_dup_b is then refused, "fixture.dup" must still be this plugin's. */
#include "scale_layer.h"

static const plx_component_desc dup_component = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_LAYER,
    .name = "fixture.dup",
    .description = "the scale layer, first of two",
    .table = &fixture_scale_layer,
};
static const plx_component_desc* const components[] = {&dup_component};

static const plx_plugin_descriptor descriptor = {
    sizeof(plx_plugin_descriptor), PLX_ABI_VERSION, 0, 1, "fixture_dup_a", "0.3.0",
    "Registers fixture.dup", components, fixture_scale_init, NULL,
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host;
  *out = &descriptor;
  return PLX_OK;
}
