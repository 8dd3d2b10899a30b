/* Plexus SDK: the topology-provider kind (PLX_KIND_TOPOLOGY), table version 1.
 *
 * A topology provider factors the world into rank grids and enumerates the process groups on
 * them (tp, cp, ep, dp, pp and their combinations; per-module grids for heterogeneous models).
 * It enumerates EVERY group of every kind over the whole world, identically on every rank; the
 * host then creates the communicators collectively and keeps those containing its rank. */
#ifndef PLEXUS_TOPOLOGY_H
#define PLEXUS_TOPOLOGY_H

#include "plexus/abi.h"
#include "plexus/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct plx_group_sink {
  uint32_t struct_size;
  uint32_t reserved;
  void* ctx;
  /* One call per group. Groups of one kind must not overlap; `ranks` are world ranks in the
   * order that defines the group's own ranks. */
  plx_status (*add_group)(void* ctx, const char* kind, const int32_t* ranks, uint32_t count);
} plx_group_sink;

typedef struct plx_topology_args {
  uint32_t struct_size;
  int32_t world_size;
  int32_t rank;
  uint32_t reserved;
  plx_config config; /* the provider's config section (sizes of tp, cp, ep, pp, modules ...) */
} plx_topology_args;

typedef struct plx_topology_v1 {
  uint32_t struct_size;
  uint32_t reserved;
  /* Validates the config against world_size (errors name the sizes that do not factor) and
   * enumerates the groups into `sink`. */
  plx_status (*build)(const plx_topology_args* args, const plx_group_sink* sink);
} plx_topology_v1;

PLX_PIN_SIZE(plx_group_sink, 24);
PLX_PIN_SIZE(plx_topology_args, 24);
PLX_PIN_SIZE(plx_topology_v1, 16);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_TOPOLOGY_H */
