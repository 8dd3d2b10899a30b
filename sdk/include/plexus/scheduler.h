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
  /* ---- ABI 1.7: pipeline parallelism ---- */
  /* Where this rank is in the pipeline and which of its chunks (virtual stages) it holds. Units
   * are numbered over all of this rank's chunks, chunk after chunk in forward order; chunk v of
   * pipeline rank r is the model's chunk v * pipeline_size + r (Megatron's order). Without
   * pipeline parallelism: 1 chunk holding every unit, rank 0 of 1. A host before 1.7 has none of
   * this (check PLX_HAS_FIELD(env, plx_schedule_env, num_chunks)): its units are one chunk. */
  uint32_t num_chunks;
  uint32_t pipeline_rank;
  uint32_t pipeline_size;
  uint32_t reserved2;
  /* The units of chunk `chunk`: [*first, *first + *count). */
  plx_status (*chunk_units)(void* ctx, uint32_t chunk, uint32_t* first, uint32_t* count);
  /* Point-to-point between pipeline stages, over the host's "pp" group. Each starts its transfer
   * and returns at once; the engine completes a receive when its tensor is needed (the forward of
   * the chunk's first unit waits for its input, the backward of its last unit for its output's
   * gradient) and every transfer by the end of the step, so the order of calls between stages
   * cannot deadlock as long as each stage eventually makes the calls its peers match. Peers follow
   * the ring: chunk v's output on the last stage is chunk v + 1's input on stage 0.
   * send_forward: the chunk's output (after its last unit's forward) to the next stage;
   * recv_forward: the chunk's input from the previous stage (not for the chunk holding the
   * embedding); send_backward: the gradient of the chunk's input (after its first unit's backward)
   * to the previous stage; recv_backward: the gradient of its output from the next stage (not for
   * the chunk holding the head). A call that has no peer (send_forward of the head's chunk, ...)
   * is an error naming it. */
  plx_status (*send_forward)(void* ctx, uint32_t microbatch, uint32_t chunk);
  plx_status (*recv_forward)(void* ctx, uint32_t microbatch, uint32_t chunk);
  plx_status (*send_backward)(void* ctx, uint32_t microbatch, uint32_t chunk);
  plx_status (*recv_backward)(void* ctx, uint32_t microbatch, uint32_t chunk);
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
/* ABI 1.7 */
PLX_PIN_OFFSET(plx_schedule_env, num_chunks, 88);
PLX_PIN_OFFSET(plx_schedule_env, chunk_units, 104);
PLX_PIN_OFFSET(plx_schedule_env, recv_backward, 136);
PLX_PIN_SIZE(plx_schedule_env, 144);
PLX_PIN_SIZE(plx_scheduler_v1, 32);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_SCHEDULER_H */
