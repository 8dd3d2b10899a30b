/* Plexus SDK: the fusion-backend kind (PLX_KIND_FUSION_BACKEND), table version 1.
 *
 * A fusion backend implements one family of fused primitives behind one family table, e.g. the
 * "mhc" family (manifold-constrained hyper-connections). This generic wrapper says which family
 * and family-table version it implements and on which devices; the family table itself is
 * defined by the family's own SDK header. Several backends of one family (native, fused, a
 * third party's) are interchangeable by config. */
#ifndef PLEXUS_FUSION_H
#define PLEXUS_FUSION_H

#include "plexus/abi.h"
#include "plexus/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct plx_fusion_create_args {
  uint32_t struct_size;
  uint32_t reserved;
  DLDevice device;
  plx_config config; /* the backend's config section, validated against its schema */
} plx_fusion_create_args;

typedef struct plx_fusion_backend_v1 {
  uint32_t struct_size;
  uint32_t family_version; /* PLX_MAKE_VERSION(major, minor) of the family table implemented */
  const char* family;      /* e.g. "mhc" */
  uint64_t device_mask;    /* PLX_DEVICE_BIT(kDLCPU) | PLX_DEVICE_BIT(kDLCUDA) ... */
  /* The family's table (e.g. const plx_mhc_v1*). It starts with uint32_t struct_size, and its
   * functions take the backend instance from `create` as their first argument. */
  const void* family_table;
  /* Optional (NULL for stateless backends): an instance per device holding workspaces. */
  plx_status (*create)(const plx_fusion_create_args* args, void** out_instance);
  void (*destroy)(void* instance);
} plx_fusion_backend_v1;

PLX_PIN_SIZE(plx_fusion_create_args, 24);
PLX_PIN_OFFSET(plx_fusion_backend_v1, family, 8);
PLX_PIN_OFFSET(plx_fusion_backend_v1, family_table, 24);
PLX_PIN_SIZE(plx_fusion_backend_v1, 48);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_FUSION_H */
