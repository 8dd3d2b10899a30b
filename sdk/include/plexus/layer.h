/* Plexus SDK: the layer kind (PLX_KIND_LAYER), table version 1.
 *
 * A layer is a sublayer function F with its parameters (attention, MLP, MoE, embedding, head).
 * The residual connection is NOT inside F: the stack composes F with a connection (a plain
 * residual, or mHC from a fusion backend), so every layer works with every connection.
 *
 * What the design carries for later features:
 *  - Stages. Forward and backward are split into stages, each compute or communication, so a
 *    scheduler can interleave the stages of different microbatches (e.g. MoE dispatch hidden
 *    under another microbatch's compute). Forward runs stages 0..S-1; backward S-1..0.
 *  - Per-microbatch state. Everything a backward needs from its forward lives in a state object
 *    created per microbatch, never in the layer, so microbatches can be in flight together.
 *  - Host-owned parameters. A layer declares its parameters (plx_param_spec); the host allocates,
 *    initializes, checkpoints and optimizes them, and passes views to every call. A wrapper such
 *    as an FSDP unit can therefore keep them sharded and gather them just for the call.
 *  - Groups and streams through the host (plx_host_api): a layer asks for "tp" or "ep" by name. */
#ifndef PLEXUS_LAYER_H
#define PLEXUS_LAYER_H

#include "plexus/abi.h"
#include "plexus/host.h"
#include "plexus/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PLX_STAGE_COMPUTE 0
#define PLX_STAGE_COMM 1

typedef struct plx_stage_info {
  uint32_t struct_size;
  uint32_t kind;    /* PLX_STAGE_COMPUTE or PLX_STAGE_COMM */
  const char* name; /* e.g. "attention", "dispatch" */
} plx_stage_info;

/* Parameter flags. */
#define PLX_PARAM_NO_WEIGHT_DECAY (1u << 0) /* norms, biases, gates */
/* The layer reduces this gradient itself (tensor- or expert-parallel); the engine must not
 * reduce it again over data parallelism. */
#define PLX_PARAM_GRAD_REDUCED (1u << 1)
/* A sharding wrapper must keep this parameter whole on every rank. */
#define PLX_PARAM_REPLICATED (1u << 2)
/* ABI 1.5: state, not a trained parameter (an MoE router's expert bias). The host allocates,
 * initializes and checkpoints it and passes it with the parameters, but gives it no gradient (its
 * param_grads entry has data NULL), never reduces, optimizes, clips or decays it, keeps it out of
 * the gradient norm and the finiteness check, and keeps it whole on every rank. The layer changes
 * it itself, in after_step, identically on every rank. Its grad_group must be NULL. */
#define PLX_PARAM_BUFFER (1u << 3)
/* ABI 1.8: the parameter is this rank's shard of a tensor split over the "tp" group: see tp_dim,
 * tp_num_parts and tp_part_sizes in plx_param_spec. */
#define PLX_PARAM_TENSOR_PARALLEL (1u << 4)
/* ABI 1.8: whole on every tp rank, but its gradient is this rank's part (the layer ran on this
 * rank's tokens under sequence parallelism): the host sums it over the "tp" group, after the
 * data-parallel reduction (Megatron's `sequence_parallel` parameter attribute). */
#define PLX_PARAM_SEQUENCE_PARALLEL (1u << 5)
/* ABI 1.8: dimension 0 is the padded vocabulary (model_config.padded_vocab_size, which depends on
 * tp): a checkpoint padded otherwise loads its rows up to the smaller padding and zeros beyond it,
 * as Megatron's allow_shape_mismatch does for the embedding and output layer. */
#define PLX_PARAM_VOCABULARY (1u << 6)

/* How the host initializes a parameter, with its counter-based RNG keyed by the run's seed and
 * the parameter's full name (so initialization does not depend on device or load order). */
#define PLX_INIT_ZEROS 0
#define PLX_INIT_ONES 1
#define PLX_INIT_CONSTANT 2       /* init_a */
#define PLX_INIT_NORMAL 3         /* mean 0, std init_a */
#define PLX_INIT_UNIFORM 4        /* in [init_a, init_b) */
#define PLX_INIT_XAVIER_UNIFORM 5 /* fans from the last two dims, gain init_a (1 when 0) */
#define PLX_INIT_CUSTOM 6         /* the layer's init_param fills it */

typedef struct plx_param_spec {
  uint32_t struct_size;
  uint32_t flags;       /* PLX_PARAM_* */
  const char* name;     /* checkpoint name within the layer, e.g. "linear_qkv.weight" */
  plx_tensor_desc desc; /* shape and master dtype (fp32) */
  uint32_t init;        /* PLX_INIT_* */
  uint32_t reserved;
  double init_a;
  double init_b;
  /* The group its gradient is reduced over; NULL means "dp". The engine sums it over the group
   * and divides by the dp size: the average for "dp"; for a group of fewer ranks (an MoE expert
   * over "expert_dp"), whose gradient already holds the data of the other ranks that sent it
   * tokens, the same mean over the data-parallel ranks. */
  const char* grad_group;
  /* ABI 1.6: the parameter's name, within the layer like `name`, in Megatron's Transformer
   * Engine spelling when that differs: a pre-norm that TE fuses into the linear after it
   * ("input_layernorm.weight" is "self_attention.linear_qkv.layer_norm_weight"). Checkpoints are
   * written in the spelling checkpoint.names chooses and read in either. NULL: one spelling. */
  const char* te_name;

  /* ---- ABI 1.8: tensor parallelism ---- */
  /* With PLX_PARAM_TENSOR_PARALLEL, desc is this rank's shard of a whole tensor split over the
   * "tp" group (t ranks) along dimension tp_dim. Along that dimension the whole tensor is
   * tp_num_parts consecutive parts of whole sizes tp_part_sizes (each divisible by t; 0 parts:
   * one, the whole dimension); rank r's shard is, part after part, slice r of the part's t equal
   * slices. One part is Megatron's plain column or row split (linear_qkv by query groups, fc2,
   * the vocabulary); two parts of F rows are SwiGLU's fc1, [gate_r; up_r] on rank r; five are
   * Mamba's in_proj [z_r, x_r, B_r, C_r, dt_r]. The host initializes, checkpoints and reshards
   * the WHOLE tensor (a PLX_INIT_CUSTOM init_param gets the whole tensor, the host keeps the
   * shard), so a run starts from the same values and writes the same files at every t; it sums
   * the shards' squares over tp in the gradient norm. tp_part_sizes stays valid while the layer
   * lives. Without the flag the parameter is whole and replicated on every tp rank. */
  int32_t tp_dim;
  uint32_t tp_num_parts;
  const int64_t* tp_part_sizes;

  /* ---- ABI 1.10 ---- */
  /* The group a PLX_PARAM_TENSOR_PARALLEL parameter is split over: NULL or "tp" (the default, as
   * before 1.10), or "expert_tp", the expert grid's tensor-parallel group (Megatron's
   * expert_tensor_parallel_size): an MoE layer's experts. The host cuts, gathers, reshards and
   * norms the shards over that group; any other name is refused. */
  const char* tp_group;
} plx_param_spec;

/* Layer flags (plx_layer_info.flags). */
#define PLX_LAYER_PRODUCES_LOSS (1u << 0)   /* output 0 is a scalar loss; backward seeds from it */
#define PLX_LAYER_HAS_OUTPUT_BIAS (1u << 1) /* output 1 is F's output bias, for fused bias-add */
/* ABI 1.9: the layer is correct on a cp rank's chunks of each sequence (plexus/cpp/
 * context_parallel.hpp): it works token by token, or exchanges what it needs over the host's "cp"
 * group itself. With a cp group of more than one rank the host refuses a model with a layer
 * that does not set it, since a layer that mixes tokens unaware of the split would be silently
 * wrong. */
#define PLX_LAYER_CONTEXT_PARALLEL (1u << 2)

typedef struct plx_layer_info {
  uint32_t struct_size;
  uint32_t flags; /* PLX_LAYER_* */
  uint32_t num_params;
  uint32_t num_stages; /* at least 1 */
  uint32_t num_inputs;
  uint32_t num_outputs;
} plx_layer_info;

typedef struct plx_layer_create_args {
  uint32_t struct_size;
  uint32_t layer_index; /* position of this layer in the stack, 0-based */
  uint32_t num_layers;  /* depth of the stack (for depth-scaled initialization) */
  uint32_t reserved;
  DLDevice device;
  plx_config config;       /* the component's own section, validated, defaults filled */
  plx_config model_config; /* the model section shared by all layers (hidden size, ...) */
  /* ABI 1.6: the layers that add to the residual stream (every physical layer of the main
   * decoder, as the model's stack describes it). Depth-scaled initialization of an output
   * projection divides its std by the square root of this: Megatron's GPT rule
   * std / sqrt(2 * num_layers) and its hybrid rule std / sqrt(num_layers) (num_layers counting
   * physical layers) are both std / sqrt(residual_layers). 0 from a host before 1.6 (read it
   * through plx_layer_residual_layers, which then gives 2 * num_layers, the GPT rule). */
  uint32_t residual_layers;
  uint32_t reserved2;
} plx_layer_create_args;

/* The residual depth of a layer's create args: residual_layers from a 1.6 host, the GPT rule
 * 2 * num_layers from an older one. */
static inline uint32_t plx_layer_residual_layers(const plx_layer_create_args* args) {
  if (args->struct_size >= PLX_FIELD_END(plx_layer_create_args, residual_layers) && args->residual_layers > 0)
    return args->residual_layers;
  return 2u * args->num_layers;
}

#define PLX_FORWARD_TRAINING (1u << 0) /* keep in the state what backward will need */

typedef struct plx_forward_args {
  uint32_t struct_size;
  uint32_t microbatch;
  uint32_t flags; /* PLX_FORWARD_* */
  uint32_t num_inputs;
  const DLTensor* inputs;
  uint32_t num_outputs;
  uint32_t num_params;
  DLTensor* outputs;      /* allocated by the host from output_desc; written by the layer */
  const DLTensor* params; /* parameter values in plx_param_spec order (whole, even if sharded) */
  plx_stream compute_stream;
  plx_stream comm_stream;
  uint64_t seed; /* RNG key for this (step, microbatch, layer), e.g. for dropout */
} plx_forward_args;

#define PLX_BACKWARD_SKIP_WEIGHT_GRADS (1u << 0) /* weights later, in backward_weights */

typedef struct plx_backward_args {
  uint32_t struct_size;
  uint32_t microbatch;
  uint32_t flags; /* PLX_BACKWARD_* */
  uint32_t num_outputs;
  const DLTensor* grad_outputs;
  uint32_t num_inputs;
  uint32_t num_params;
  /* Written, not accumulated. An entry whose data is NULL needs no gradient (e.g. token ids). */
  DLTensor* grad_inputs;
  const DLTensor* params;
  /* Accumulated into (+=), so gradients of microbatches add up; the host zeroes them. */
  DLTensor* param_grads;
  plx_stream compute_stream;
  plx_stream comm_stream;

  /* ---- ABI 1.4 ---- */
  /* d(objective) / d(this microbatch's loss): what the host seeds the head's backward with
   * (1 / microbatches for the engine's mean over microbatches). A layer that adds a loss term of
   * its own (an MoE layer's load-balancing and z-losses) scales that term's gradient by it, so
   * the term is weighted like the main loss. Read it with plx_backward_loss_scale: 1 when the
   * caller's struct predates the field or leaves it zero. */
  double loss_scale;
} plx_backward_args;

/* The loss scale of a backward call (ABI 1.4): 1 for a caller built before the field, and for 0
 * (a zero-filled struct whose caller did not set it; no objective scales a loss by 0). */
static inline double plx_backward_loss_scale(const plx_backward_args* args) {
  if (!PLX_HAS_FIELD(args, plx_backward_args, loss_scale) || args->loss_scale == 0.0) return 1.0;
  return args->loss_scale;
}

/* ABI 1.5: what after_step gets. */
typedef struct plx_step_args {
  uint32_t struct_size;
  uint32_t num_params;
  int64_t step; /* the optimizer step just taken, 0-based */
  /* Parameter values in plx_param_spec order, writable (for the buffers). Under a data-parallel
   * strategy that shards parameters (plexus/data_parallel.h) only the buffers are whole here: the
   * other entries have data NULL. */
  DLTensor* params;
} plx_step_args;

/* ABI 1.10: what estimate_activation_bytes is asked beside the inputs. */
typedef struct plx_activation_query {
  uint32_t struct_size;
  /* The ranks of the context-parallel group the sequences are cut over (1: none; 0 reads as 1).
   * The inputs are one rank's share, and a layer answers for how it would run on that rank,
   * whatever cp group it was created with (a planning tool asks for any size). */
  uint32_t cp_size;
} plx_activation_query;

/* The function table. `layer` and `state` are the plugin's own objects. Out structs are sized by
 * the caller (struct_size set before the call). Functions marked optional may be NULL. */
typedef struct plx_layer_v1 {
  uint32_t struct_size;
  uint32_t reserved;
  plx_status (*create)(const plx_layer_create_args* args, void** out_layer);
  void (*destroy)(void* layer);
  plx_status (*get_info)(void* layer, plx_layer_info* out);
  plx_status (*get_param)(void* layer, uint32_t index, plx_param_spec* out);
  plx_status (*get_stage)(void* layer, uint32_t index, plx_stage_info* out);
  /* The outputs' shapes and dtypes for given inputs; `outputs` has num_outputs entries. */
  plx_status (*output_desc)(void* layer, uint32_t num_inputs, const plx_tensor_desc* inputs,
                            uint32_t num_outputs, plx_tensor_desc* outputs);
  /* Optional: fills a PLX_INIT_CUSTOM parameter. */
  plx_status (*init_param)(void* layer, uint32_t index, DLTensor* value, uint64_t seed);
  plx_status (*state_create)(void* layer, uint32_t microbatch, void** out_state);
  void (*state_destroy)(void* layer, void* state);
  plx_status (*forward)(void* layer, void* state, uint32_t stage, const plx_forward_args* args);
  plx_status (*backward)(void* layer, void* state, uint32_t stage, const plx_backward_args* args);
  /* Optional: weight gradients split from input gradients, so a scheduler can delay them to
   * fill gaps. Called once per microbatch after every backward stage ran with
   * PLX_BACKWARD_SKIP_WEIGHT_GRADS (and never when they ran without it), before the state is
   * destroyed; another microbatch's stages may run in between. The args carry the microbatch,
   * params, param_grads (accumulated into, as in backward) and loss_scale; grad_outputs and
   * grad_inputs are NULL with counts 0: the layer keeps in its state what backward computed for
   * them. The sums must be those backward computes without the flag, in the same order, so that
   * splitting changes no bit of the gradients. */
  plx_status (*backward_weights)(void* layer, void* state, const plx_backward_args* args);

  /* ---- ABI 1.1 ---- */
  /* Optional: floating-point operations of one forward and one backward for these inputs, so
   * the trainer can report model FLOP utilization. PLX_ERR_UNSUPPORTED when unknown. */
  plx_status (*estimate_flops)(void* layer, uint32_t num_inputs, const plx_tensor_desc* inputs,
                               double* out_forward_flops, double* out_backward_flops);

  /* ---- ABI 1.5 ---- */
  /* Optional: called by the host for every layer after each optimizer step (not after an
   * evaluation), on every rank, once the parameters hold the step's new values. A layer updates
   * its PLX_PARAM_BUFFER parameters here in place, from what its training forwards of the step
   * recorded in the layer object (e.g. an MoE router's tokens per expert); any collective it
   * runs must be run by every rank of the group. */
  plx_status (*after_step)(void* layer, const plx_step_args* args);

  /* ---- ABI 1.10 ---- */
  /* Optional: the bytes a training forward of these inputs leaves in its state for the backward
   * (the activations it saves), so that a planning tool can tell a rank's activation memory
   * before a job runs. Temporaries freed within a call are not counted, nor the outputs (the host
   * holds those). PLX_ERR_UNSUPPORTED when unknown. */
  plx_status (*estimate_activation_bytes)(void* layer, uint32_t num_inputs, const plx_tensor_desc* inputs,
                                          const plx_activation_query* query, double* out_bytes);
} plx_layer_v1;

PLX_PIN_SIZE(plx_stage_info, 16);
PLX_PIN_OFFSET(plx_param_spec, desc, 16);
PLX_PIN_OFFSET(plx_param_spec, init, 88);
PLX_PIN_OFFSET(plx_param_spec, grad_group, 112);
PLX_PIN_OFFSET(plx_param_spec, te_name, 120); /* ABI 1.6 */
PLX_PIN_OFFSET(plx_param_spec, tp_dim, 128);  /* ABI 1.8 */
PLX_PIN_OFFSET(plx_param_spec, tp_part_sizes, 136);
PLX_PIN_OFFSET(plx_param_spec, tp_group, 144); /* ABI 1.10 */
PLX_PIN_SIZE(plx_param_spec, 152);
PLX_PIN_SIZE(plx_layer_info, 24);
PLX_PIN_OFFSET(plx_layer_create_args, device, 16);
PLX_PIN_OFFSET(plx_layer_create_args, residual_layers, 40); /* ABI 1.6 */
PLX_PIN_SIZE(plx_layer_create_args, 48);
PLX_PIN_OFFSET(plx_forward_args, outputs, 32);
PLX_PIN_SIZE(plx_forward_args, 72);
PLX_PIN_OFFSET(plx_backward_args, grad_inputs, 32);
PLX_PIN_OFFSET(plx_backward_args, loss_scale, 72); /* ABI 1.4 */
PLX_PIN_SIZE(plx_backward_args, 80);
PLX_PIN_OFFSET(plx_layer_v1, create, 8);
PLX_PIN_OFFSET(plx_layer_v1, backward_weights, 96);
/* ABI 1.1 */
PLX_PIN_OFFSET(plx_layer_v1, estimate_flops, 104);
/* ABI 1.5 */
PLX_PIN_OFFSET(plx_step_args, params, 16);
PLX_PIN_SIZE(plx_step_args, 24);
PLX_PIN_OFFSET(plx_layer_v1, after_step, 112);
/* ABI 1.10 */
PLX_PIN_SIZE(plx_activation_query, 8);
PLX_PIN_OFFSET(plx_layer_v1, estimate_activation_bytes, 120);
PLX_PIN_SIZE(plx_layer_v1, 128);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_LAYER_H */
