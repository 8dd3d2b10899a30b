/* fixture_older_minor: a plugin as built and shipped with SDK 1.0. It is compiled against the
 * frozen headers in tests/abi/sdk-1.0/include, not the current SDK, and so is its copy of the
 * scale layer ("fixture.older_scale").
 *
 * Exercises backward compatibility: every later 1.x host must load it and run its layer, reading
 * its smaller structs and zero-extending its smaller table. */
#include "scale_layer.h"

/* Fails the build if the include order ever picks up the current SDK instead of the snapshot. */
PLX_STATIC_ASSERT(PLX_ABI_MAJOR == 1 && PLX_ABI_MINOR == 0, built_against_the_frozen_1_0_headers);

static const plx_component_desc scale_component = {
    sizeof(plx_component_desc), PLX_KIND_LAYER, "fixture.older_scale", "y = w * x, from SDK 1.0", NULL,
    &fixture_scale_layer};
static const plx_component_desc* const components[] = {&scale_component};

static const plx_plugin_descriptor descriptor = {
    sizeof(plx_plugin_descriptor),
    PLX_ABI_VERSION, /* 1.0: the snapshot's */
    0,
    1,
    "fixture_older_minor",
    "0.3.0",
    "A plugin built with SDK 1.0",
    components,
    fixture_scale_init,
    NULL,
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host;
  *out = &descriptor;
  return PLX_OK;
}
