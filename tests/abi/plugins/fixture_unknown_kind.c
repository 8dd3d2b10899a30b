/* fixture_unknown_kind: declares a component of kind 99, which no ABI 1.x defines.
 *
 * Exercises the kind check: the host cannot know the table's layout, so it must refuse the
 * plugin, naming the kind number, rather than guess. */
#include "plexus/plugin.h"

/* Whatever kind 99 would be, its table starts with struct_size like every table. */
typedef struct mystery_table {
  uint32_t struct_size;
  uint32_t reserved;
} mystery_table;

static const mystery_table table = {sizeof(mystery_table), 0};

static const plx_component_desc mystery_component = {
    .struct_size = sizeof(plx_component_desc),
    .kind = 99,
    .name = "fixture.mystery",
    .description = "a component of an unknown kind",
    .table = &table,
};
static const plx_component_desc* const components[] = {&mystery_component};

static const plx_plugin_descriptor descriptor = {
    sizeof(plx_plugin_descriptor), PLX_ABI_VERSION, 0, 1, "fixture_unknown_kind", "0.3.0",
    "Declares a component of kind 99", components, NULL, NULL,
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host;
  *out = &descriptor;
  return PLX_OK;
}
