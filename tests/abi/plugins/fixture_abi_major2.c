/* fixture_abi_major2: a plugin built for a future ABI major, 2.0.
 *
 * Across majors only the first two descriptor fields (struct_size, abi_version) are frozen, so
 * this descriptor is nothing more than them plus a field 1.x does not know. Exercises the host's
 * major check: it must refuse the plugin naming both versions ("2.0" and its own "1.<minor>")
 * without reading anything past abi_version. */
#include "plexus/plugin.h"

/* What a 2.x descriptor might look like: the frozen prefix, then a layout unknown to 1.x. */
typedef struct future_descriptor {
  uint32_t struct_size;
  uint32_t abi_version;
  uint64_t v2_only_field;
} future_descriptor;

static const future_descriptor descriptor = {sizeof(future_descriptor), PLX_MAKE_VERSION(2, 0), 0};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host;
  /* The host reads it through the 1.x type, but only the common prefix. */
  *out = (const plx_plugin_descriptor*)(const void*)&descriptor;
  return PLX_OK;
}
