/* Plexus SDK: the data-parallel strategy kind (PLX_KIND_DATA_PARALLEL), table version 1. Since ABI 1.5.
 *
 * A strategy decides where the parameters, their gradients and the optimizer state of a
 * data-parallel model live, and moves them: plain replication with averaged gradients (DDP), or
 * sharded over the data-parallel ranks (ZeRO-1/2/3, FSDP). The engine knows none of them by name.
 *
 * The engine cuts the model into units (an FSDP unit: the embedding, each logical decoder layer or
 * a few of them, the output layers) and lays each unit's parameters out as one flat buffer: the
 * parameters concatenated in a fixed order, `numel` elements of one dtype. A unit whose
 * parameters are reduced over different groups (an MoE layer: its experts over "expert_dp", the
 * rest over "dp") is given as one unit per group. The strategy owns every buffer (from the host's
 * allocator) and hands the engine views:
 *   - acquire/release: the whole parameter values, around the unit's forward, its backward,
 *     a checkpoint's read or an initialization's write. Counted: every acquire has one release;
 *     views stay valid until the matching release. A sharded strategy gathers here (waiting for
 *     a prefetch it started earlier) and frees the whole copy at the last release.
 *   - grads/grads_ready: the whole gradient buffer a backward accumulates into, and the signal that
 *     the contributions made since are complete, so its reduction can start (overlapped with the
 *     rest of backward).
 *   - finish_grads, shard, after_update: around the optimizer step, which the engine runs on each
 *     unit's shard (this rank's slice of the flat buffer, with the engine's own optimizer state).
 * A strategy communicates only through the host's groups (plx_host_api) and started requests,
 * and every rank makes the same calls in the same order, as the comm contract requires.
 *
 * Call order in one training step, per unit u (microbatches m = 0..M-1, any scheduler order):
 *   begin_step; for each m: [acquire(u, FORWARD) ... release(u, FORWARD)]
 *   [acquire(u, BACKWARD), grads(u) ... release(u, BACKWARD), grads_ready(u, last)];
 *   finish_grads; shard(u) for the optimizer; after_update.
 * Gradients are written with +=: the first grads() of a step (and the first after a reduction a
 * sharded strategy started) returns a zeroed buffer. grads_ready's `last` is nonzero when no
 * more contributions to u come this step. */
#ifndef PLEXUS_DATA_PARALLEL_H
#define PLEXUS_DATA_PARALLEL_H

#include "plexus/abi.h"
#include "plexus/host.h"
#include "plexus/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the engine acquires a unit's whole parameters for. */
#define PLX_DP_FORWARD 0
#define PLX_DP_BACKWARD 1
/* To read the whole values (a checkpoint): collective over the unit's group when sharded. */
#define PLX_DP_READ 2
/* To write the whole values (initialization, loading a checkpoint), which the engine fills
 * completely; its release keeps this rank's part. No communication: every rank writes the same. */
#define PLX_DP_WRITE 3

/* Unit flags (plx_dp_unit_desc.flags). */
#define PLX_DP_UNIT_REPLICATED (1u << 0) /* keep it whole on every rank (PLX_PARAM_REPLICATED) */

typedef struct plx_dp_unit_desc {
  uint32_t struct_size;
  uint32_t flags;      /* PLX_DP_UNIT_* */
  const char* name;    /* for messages: "decoder.layers.3", "decoder.layers.3 (expert_dp)" */
  const char* group;   /* the group its gradients are averaged and its state sharded over */
  int64_t numel;       /* elements of the flat buffer the engine reads and writes */
  DLDataType dtype;    /* of values and gradients (float32) */
  uint32_t reserved;
  DLDevice device;
  /* Applied to the group's average: |group| / |dp|. A group smaller than dp (an MoE expert's
   * "expert_dp") holds gradients that already gather several ranks' tokens; this turns their
   * average over the group into the mean over the data-parallel ranks. 1 for "dp". */
  double grad_scale;
} plx_dp_unit_desc;

typedef struct plx_dp_setup {
  uint32_t struct_size;
  uint32_t num_units;
  const plx_dp_unit_desc* const* units; /* in forward order; a unit's index is its position */
  DLDevice device;                      /* the model's device */
  uint32_t reserved[2];
} plx_dp_setup;

/* Layout flags (plx_dp_layout.flags). */
#define PLX_DP_PARAMS_SHARDED (1u << 0) /* whole values exist only while acquired */
#define PLX_DP_GRADS_SHARDED (1u << 1)  /* whole gradients exist only until their reduction */
/* The shard is this rank's part of a partition of the unit over its group, so a sum over the
 * unit's elements (the gradient norm) adds the ranks' parts over the group. Without it every rank
 * of the group holds and updates the same elements. */
#define PLX_DP_OPTIM_SHARDED (1u << 2)

typedef struct plx_dp_layout {
  uint32_t struct_size;
  uint32_t flags;       /* PLX_DP_* */
  /* The elements this rank's optimizer updates: [shard_offset, shard_offset + shard_numel) of
   * the flat buffer. It may reach past numel (padding to a multiple of the group size); the
   * engine keeps those elements zero. */
  int64_t shard_offset;
  int64_t shard_numel;
  /* The length of the whole buffers acquire and grads hand out (>= numel, with the padding). */
  int64_t padded_numel;
} plx_dp_layout;

typedef struct plx_dp_memory {
  uint32_t struct_size;
  uint32_t reserved;
  uint64_t param_bytes;      /* held now: shards and whole copies */
  uint64_t grad_bytes;
  uint64_t peak_param_bytes; /* the most held at once since create */
  uint64_t peak_grad_bytes;
  uint64_t peak_bytes;       /* the most values and gradients held together at once */
} plx_dp_memory;

typedef struct plx_data_parallel_v1 {
  uint32_t struct_size;
  uint32_t reserved;
  /* `setup` and what it points to are valid during the call only. */
  plx_status (*create)(plx_config config, const plx_dp_setup* setup, void** out_strategy);
  void (*destroy)(void* strategy);
  plx_status (*layout)(void* strategy, uint32_t unit, plx_dp_layout* out);
  /* The unit's whole values, [padded_numel]; PLX_DP_* purpose. */
  plx_status (*acquire)(void* strategy, uint32_t unit, uint32_t purpose, DLTensor* out_values);
  plx_status (*release)(void* strategy, uint32_t unit, uint32_t purpose);
  /* A hint that `unit` will be acquired for `purpose` soon: a sharded strategy starts its gather
   * now, to overlap it with the current unit's compute. Collective like the gather. */
  plx_status (*prefetch)(void* strategy, uint32_t unit, uint32_t purpose);
  /* A training step begins: every gradient is zero. */
  plx_status (*begin_step)(void* strategy);
  /* The whole gradient buffer [padded_numel] to accumulate the unit's gradients into (+=). */
  plx_status (*grads)(void* strategy, uint32_t unit, DLTensor* out_grads);
  /* The contributions since grads() are complete (`last` != 0: the step's last ones). */
  plx_status (*grads_ready)(void* strategy, uint32_t unit, int32_t last);
  /* Every reduction is complete: each shard's gradient is the mean over the data-parallel ranks. */
  plx_status (*finish_grads)(void* strategy);
  /* The optimizer's views of the unit's shard: values and gradients, [shard_numel] each. */
  plx_status (*shard)(void* strategy, uint32_t unit, DLTensor* out_values, DLTensor* out_grads);
  /* The optimizer has updated every shard: whole copies are brought up to date. */
  plx_status (*after_update)(void* strategy);
  /* Collective over the unit's group: `shard` ([shard_numel], laid out like the unit's shard,
   * e.g. an optimizer moment) gathered whole into `full` ([padded_numel]) on every rank. */
  plx_status (*gather)(void* strategy, uint32_t unit, const DLTensor* shard, DLTensor* full);
  plx_status (*memory)(void* strategy, plx_dp_memory* out);
} plx_data_parallel_v1;

PLX_PIN_OFFSET(plx_dp_unit_desc, name, 8);
PLX_PIN_OFFSET(plx_dp_unit_desc, numel, 24);
PLX_PIN_OFFSET(plx_dp_unit_desc, device, 40);
PLX_PIN_SIZE(plx_dp_unit_desc, 56);
PLX_PIN_OFFSET(plx_dp_setup, units, 8);
PLX_PIN_SIZE(plx_dp_setup, 32);
PLX_PIN_SIZE(plx_dp_layout, 32);
PLX_PIN_SIZE(plx_dp_memory, 48);
PLX_PIN_OFFSET(plx_data_parallel_v1, create, 8);
PLX_PIN_OFFSET(plx_data_parallel_v1, memory, 112);
PLX_PIN_SIZE(plx_data_parallel_v1, 120);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_DATA_PARALLEL_H */
