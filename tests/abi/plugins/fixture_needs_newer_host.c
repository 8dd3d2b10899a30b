/* fixture_needs_newer_host: a plugin built with SDK 1.(MINOR+1) that uses something only a host
 * of that minor has (min_host_minor = MINOR+1).
 *
 * Exercises the minor check: same major, but this host is too old. The refusal must name the
 * host minor it needs and the host's own version. It is refused before its components are read,
 * so it declares none. */
#include "plexus/plugin.h"

static const plx_plugin_descriptor descriptor = {
    sizeof(plx_plugin_descriptor),
    PLX_MAKE_VERSION(1, PLX_ABI_MINOR + 1),
    PLX_ABI_MINOR + 1,
    0,
    "fixture_needs_newer_host",
    "0.3.0",
    "Needs a host newer than this one",
    NULL,
    NULL,
    NULL,
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host;
  *out = &descriptor;
  return PLX_OK;
}
