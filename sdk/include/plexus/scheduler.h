/* Plexus SDK: the scheduler kind (PLX_KIND_SCHEDULER), table version 1.
 *
 * A scheduler decides the order in which the stages of microbatches run, and on which stream.
 * The engine hands it a plx_schedule_env: the shape of the work (microbatches x units x stages)
 * and callbacks that run one stage. The engine keeps per-microbatch ordering itself (one event
 * per microbatch), so a scheduler only chooses order and stream. Examples: sequential gradient
 * accumulation; combined 1F1B that runs microbatch i's forward interleaved with microbatch
 * i-1's backward so communication stages of one hide under compute stages of the other. */
#ifndef PLEXUS_SCHEDULER_H
#define PLEXUS_SCHEDULER_H

#include "plexus/abi.h"
#include "plexus/host.h"
#include "plexus/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct plx_schedule_env {
  uint32_t struct_size;
  uint32_t num_microbatches;
  uint32_t num_units; /* layers (or layer groups) of this rank, in forward order */
  uint32_t reserved;
  void* ctx;
  plx_stream compute_stream;
  plx_stream comm_stream;
  plx_status (*unit_num_stages)(void* ctx, uint32_t unit, uint32_t* out);
  plx_status (*unit_stage)(void* ctx, uint32_t unit, uint32_t stage, plx_stage_info* out);
  /* Runs one stage. Forward of (mb, unit) needs its stages in order and unit-1 finished;
   * backward runs units in reverse. The engine reports a violated order as an error. */
  plx_status (*forward)(void* ctx, uint32_t microbatch, uint32_t unit, uint32_t stage,
                        plx_stream stream);
  plx_status (*backward)(void* ctx, uint32_t microbatch, uint32_t unit, uint32_t stage,
                         plx_stream stream);
  /* Weight gradients of a unit whose backward ran with them split off (NULL from a host before
   * 1.5, which never splits them). Allowed once the unit's backward of that microbatch is
   * complete (its stage 0 ran); a unit whose backward computed its weight gradients itself (no
   * split requested, or none of its layers implements backward_weights) takes the call as a
   * no-op, so a scheduler need not know which units split. */
  plx_status (*backward_weights)(void* ctx, uint32_t microbatch, uint32_t unit,
                                 plx_stream stream);

  /* ---- ABI 1.5 ---- */
  /* Optional (NULL from an older host): the scheduler declares that it will call
   * backward_weights. Called in run_step before the step's first backward call; from then on the
   * backward of a unit leaves out the weight gradients of its layers that implement
   * backward_weights (PLX_BACKWARD_SKIP_WEIGHT_GRADS), and the scheduler must call
   * backward_weights(mb, unit) for every microbatch and unit before run_step returns: the engine
   * keeps the microbatch's layer state and the unit's gradient buffers until then, and reports a
   * missing call as an error naming the unit and microbatch. A scheduler that never calls it
   * gets weight gradients computed with the input gradients, as before 1.5. */
  plx_status (*split_weight_gradients)(void* ctx);
} plx_schedule_env;

typedef struct plx_scheduler_v1 {
  uint32_t struct_size;
  uint32_t reserved;
  plx_status (*create)(plx_config config, void** out_scheduler);
  void (*destroy)(void* scheduler);
  /* Runs forward and backward of every microbatch of one step. */
  plx_status (*run_step)(void* scheduler, const plx_schedule_env* env);
} plx_scheduler_v1;

PLX_PIN_OFFSET(plx_schedule_env, ctx, 16);
PLX_PIN_OFFSET(plx_schedule_env, forward, 56);
PLX_PIN_OFFSET(plx_schedule_env, backward_weights, 72);
/* ABI 1.5 */
PLX_PIN_OFFSET(plx_schedule_env, split_weight_gradients, 80);
PLX_PIN_SIZE(plx_schedule_env, 88);
PLX_PIN_SIZE(plx_scheduler_v1, 32);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_SCHEDULER_H */
