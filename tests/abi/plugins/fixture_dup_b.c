/* fixture_dup_b: registers "fixture.dup_b_only" and then "fixture.dup", which fixture_dup_a
 * already registered.
 *
 * Exercises duplicate detection (with fixture_dup_a): loaded second, it must be refused as a
 * whole. Its unique component comes first, so a host that registered components one by one and
 * stopped at the clash would leave "fixture.dup_b_only" behind; the test checks it does not. */
#include "scale_layer.h"

static const plx_component_desc unique_component = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_LAYER,
    .name = "fixture.dup_b_only",
    .description = "the scale layer, unique name",
    .table = &fixture_scale_layer,
};
static const plx_component_desc dup_component = {
    .struct_size = sizeof(plx_component_desc),
    .kind = PLX_KIND_LAYER,
    .name = "fixture.dup",
    .description = "the scale layer, second of two",
    .table = &fixture_scale_layer,
};
static const plx_component_desc* const components[] = {&unique_component, &dup_component};

static const plx_plugin_descriptor descriptor = {
    sizeof(plx_plugin_descriptor), PLX_ABI_VERSION, 0, 2, "fixture_dup_b", "0.3.0",
    "Registers fixture.dup again", components, fixture_scale_init, NULL,
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host;
  *out = &descriptor;
  return PLX_OK;
}
