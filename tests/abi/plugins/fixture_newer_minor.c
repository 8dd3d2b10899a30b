/* fixture_newer_minor: simulates a plugin built with a future SDK 1.(MINOR+1) that only uses what
 * this host has (min_host_minor = MINOR), so this host must accept it.
 *
 * The future SDK appended fields to the descriptor, the component desc, the layer table and
 * plx_layer_info; the plugin's structs are those larger layouts with struct_size saying so.
 * Exercises both directions of rule 1 in abi.h: the host reads only the prefixes it knows of the
 * plugin's structs, and the plugin writes into the host's smaller out structs (get_info) only as
 * much as the host's struct_size allows. The layer ("fixture.newer_scale") is the scale layer. */
#include <string.h>

#include "scale_layer.h"

/* The 1.(MINOR+1) layouts: today's structs first, then what the future appended. */
typedef struct next_descriptor {
  plx_plugin_descriptor base;
  const char* license;
} next_descriptor;

typedef struct next_component_desc {
  plx_component_desc base;
  uint64_t device_mask;
} next_component_desc;

typedef struct next_layer_table {
  plx_layer_v1 base;
  plx_status (*fuse_with_next)(void* layer, void* next_layer); /* a future optional function */
} next_layer_table;

typedef struct next_layer_info {
  plx_layer_info base;
  uint32_t max_microbatches;
  uint32_t reserved;
} next_layer_info;

/* get_info fills the future layout; fixture_copy_out clips it to what the caller has room for. */
static plx_status next_get_info(void* layer, plx_layer_info* out) {
  next_layer_info info;
  plx_status status = PLX_OK;
  memset(&info, 0, sizeof info);
  info.base.struct_size = sizeof info.base;
  if ((status = fixture_scale_get_info(layer, &info.base)) != PLX_OK) return status;
  info.base.struct_size = sizeof info;
  info.max_microbatches = 64;
  return fixture_copy_out(out, &info, sizeof info);
}

static const next_layer_table layer_table = {
    .base =
        {
            .struct_size = sizeof(next_layer_table),
            .create = fixture_scale_create,
            .destroy = fixture_scale_destroy,
            .get_info = next_get_info,
            .get_param = fixture_scale_get_param,
            .get_stage = fixture_scale_get_stage,
            .output_desc = fixture_scale_output_desc,
            .state_create = fixture_scale_state_create,
            .state_destroy = fixture_scale_state_destroy,
            .forward = fixture_scale_forward,
            .backward = fixture_scale_backward,
        },
    /* fuse_with_next: optional; a 1.(MINOR+1) host would check for NULL; this host never sees it */
    .fuse_with_next = NULL,
};

static const next_component_desc scale_component = {
    .base =
        {
            .struct_size = sizeof(next_component_desc),
            .kind = PLX_KIND_LAYER,
            .name = "fixture.newer_scale",
            .description = "y = w * x, from a newer SDK",
            .table = &layer_table,
        },
    .device_mask = PLX_DEVICE_BIT(kDLCPU),
};
static const plx_component_desc* const components[] = {&scale_component.base};

static const next_descriptor descriptor = {
    {
        sizeof(next_descriptor),
        PLX_MAKE_VERSION(1, PLX_ABI_MINOR + 1),
        PLX_ABI_MINOR, /* uses nothing this host lacks */
        1,
        "fixture_newer_minor",
        "0.3.0",
        "A plugin from a newer SDK minor",
        components,
        fixture_scale_init,
        NULL,
    },
    "MIT",
};

PLX_PLUGIN_ENTRY(host, out) {
  (void)host;
  *out = &descriptor.base;
  return PLX_OK;
}
