/* Plexus SDK: the plugin entry point and the descriptor a plugin returns.
 *
 * A plugin library exports exactly one symbol, PLX_ENTRY_SYMBOL. The host loads the library
 * (RTLD_LOCAL), calls the entry with its services table, and receives a descriptor listing the
 * plugin's components. Only the first two fields of plx_host_api and plx_plugin_descriptor
 * (struct_size, abi_version) are frozen across ABI majors; everything else is read only once
 * both sides agree on the major version. The entry must be cheap and free of side effects
 * (`plexus plugins list` calls it); work that can fail belongs in `init`. */
#ifndef PLEXUS_PLUGIN_H
#define PLEXUS_PLUGIN_H

#include "plexus/abi.h"
#include "plexus/host.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Component kinds. A kind's number never changes; new kinds are added in minor versions. */
#define PLX_KIND_LAYER 1          /* plx_layer_v1 (plexus/layer.h) */
#define PLX_KIND_FUSION_BACKEND 2 /* plx_fusion_backend_v1 (plexus/fusion.h) */
#define PLX_KIND_SCHEDULER 3      /* plx_scheduler_v1 (plexus/scheduler.h) */
#define PLX_KIND_TOPOLOGY 4       /* plx_topology_v1 (plexus/topology.h) */
#define PLX_KIND_COMM 5           /* plx_comm_v1 (plexus/comm.h) */
#define PLX_KIND_STACK 6          /* plx_stack_v1 (plexus/stack.h), since ABI 1.3 */
#define PLX_KIND_DATA_PARALLEL 7  /* plx_data_parallel_v1 (plexus/data_parallel.h), since ABI 1.5 */
#define PLX_KIND_LAST PLX_KIND_DATA_PARALLEL

/* Fields appended to plx_component_desc after ABI 1.5 are NULL by default in C++, so that a C++
 * plugin whose source fills the struct positionally for an older SDK still compiles without
 * -Wmissing-field-initializers (the layout is the same in C and C++). C sources use designated
 * initializers, which leave new fields NULL silently (docs/abi.md, "Source compatibility"). */
#if defined(__cplusplus) && __cplusplus >= 201402L /* an aggregate keeps such defaults since C++14 */
#define PLX_APPENDED_NULL = nullptr
#else
#define PLX_APPENDED_NULL
#endif

typedef struct plx_component_desc {
  uint32_t struct_size;
  uint32_t kind;             /* PLX_KIND_* */
  const char* name;          /* unique per kind over all loaded plugins, e.g. "transformer.mlp" */
  const char* description;   /* one line, shown by `plexus plugins list` */
  const char* config_schema; /* JSON schema of the component's config section, or NULL (docs/config.md) */
  const void* table;         /* the kind's function table; it starts with uint32_t struct_size */
  /* Since ABI 1.6, optional: the JSON schema (the subset of docs/config.md) of the keys this
   * component adds to the run config's "model" section, an object schema whose "properties" the
   * host adds to its own model keys: unknown keys, types, bounds and defaults are then checked and
   * filled like the framework's, with messages naming the full path ("model.moe.layer_freq"). The
   * host reads it for the model's stack component (PLX_KIND_STACK, model.stack.component), which
   * receives the model section; other kinds leave it NULL. NULL: the component adds no keys. A
   * component built against an older SDK has no such field: the host reads NULL and, not knowing
   * which keys such a stack reads, passes the model's keys it does not know through unchecked. */
  const char* model_schema PLX_APPENDED_NULL;
} plx_component_desc;

typedef struct plx_plugin_descriptor {
  uint32_t struct_size;
  uint32_t abi_version;    /* PLX_ABI_VERSION of the SDK the plugin was compiled against */
  uint32_t min_host_minor; /* the lowest host minor (same major) whose features it needs */
  uint32_t component_count;
  const char* name;        /* the plugin's name, e.g. "transformer" */
  const char* version;     /* the plugin's own version, e.g. "1.2.0" */
  const char* description;
  /* An array of pointers (not of structs), so plx_component_desc may grow. */
  const plx_component_desc* const* components;
  /* Optional: called once after the host accepted the descriptor. A non-OK status (with a
   * message through set_error) refuses the plugin and the host unloads it. */
  plx_status (*init)(const plx_host_api* host);
  /* Optional: called once before the library is unloaded. */
  void (*shutdown)(void);
} plx_plugin_descriptor;

#define PLX_ENTRY_SYMBOL "plexus_plugin_entry_v1"
typedef plx_status (*plx_entry_fn)(const plx_host_api* host, const plx_plugin_descriptor** out);

/* Declares the entry point with the right linkage and visibility:
 *   PLX_PLUGIN_ENTRY(host, out) { ... *out = &my_descriptor; return PLX_OK; } */
#define PLX_PLUGIN_ENTRY(host_param, out_param)                            \
  PLX_EXTERN_C PLX_EXPORT plx_status plexus_plugin_entry_v1(               \
      const plx_host_api* host_param, const plx_plugin_descriptor** out_param) PLX_NOEXCEPT

PLX_PIN_OFFSET(plx_component_desc, name, 8);
PLX_PIN_OFFSET(plx_component_desc, table, 32);
PLX_PIN_OFFSET(plx_component_desc, model_schema, 40); /* ABI 1.6 */
PLX_PIN_SIZE(plx_component_desc, 48);
PLX_PIN_OFFSET(plx_plugin_descriptor, abi_version, 4);
PLX_PIN_OFFSET(plx_plugin_descriptor, name, 16);
PLX_PIN_OFFSET(plx_plugin_descriptor, components, 40);
PLX_PIN_OFFSET(plx_plugin_descriptor, shutdown, 56);
PLX_PIN_SIZE(plx_plugin_descriptor, 64);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_PLUGIN_H */
