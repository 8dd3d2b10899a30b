/* Plexus SDK: the stack kind (PLX_KIND_STACK), table version 1. Since ABI 1.3.
 *
 * A stack turns the model config into the description of the decoder: its layers in order, which
 * layer component computes each, with which options, which layers form one logical layer (a
 * group), their physical and logical numbers, their checkpoint names, their pipeline segment and
 * multi-token-prediction depth. The engine assembles the model from that description and nothing
 * else: the embedding before the decoder, the final norm and the head after it, the residual or
 * mHC connection around every decoder layer. A scheduler's units are the description's logical
 * layers (plus the embedding, the final norm and the head).
 *
 * Examples: the GPT, num_layers x "[*-]" (attention and MLP as one logical layer); Megatron's
 * hybrid patterns such as "M*M-" (Mamba, attention, MLP layers each a logical layer of its own). */
#ifndef PLEXUS_STACK_H
#define PLEXUS_STACK_H

#include "plexus/abi.h"
#include "plexus/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct plx_stack_create_args {
  uint32_t struct_size;
  uint32_t reserved;
  plx_config config;       /* the stack component's own options, validated, defaults filled */
  plx_config model_config; /* the whole model section (component sections included) */
} plx_stack_create_args;

/* One physical decoder layer: a sublayer function F that the engine wraps in the connection. */
typedef struct plx_stack_layer {
  uint32_t struct_size;
  uint32_t physical_index; /* 0-based, counting every layer of the main decoder in order */
  uint32_t logical_index;  /* 0-based; every layer of one group has its group's index */
  uint32_t segment;        /* the pipeline segment it belongs to (0-based, '|' in a pattern) */
  uint32_t mtp_depth;      /* 0: the main decoder; d >= 1: the d-th multi-token-prediction block */
  uint32_t reserved;
  const char* symbol;      /* the pattern symbol, e.g. "M", "*" (for messages and `model show`) */
  const char* component;   /* the layer component (PLX_KIND_LAYER) that computes F */
  const char* options;     /* the component's options as JSON text ("{}" for none) */
  const char* options_path; /* where those options come from, for error messages ("model.attention.options") */
  /* Prepended to every parameter name the layer declares: "decoder.layers.3." */
  const char* checkpoint_prefix;
  /* The name of the connection's parameters under mHC, after the prefix:
   * "self_attention_hyper_connection." for attention, "mlp_hyper_connection." for an MLP. */
  const char* connection_prefix;
  /* ABI 1.6: one word for what the layer is, in the engine's labels, messages and profiles
   * ("decoder.layers.3 attention"): "attention", "mlp", "mamba", "moe", ... NULL (a stack built
   * before 1.6): the engine says "layer '<symbol>'". */
  const char* kind;
} plx_stack_layer;

typedef struct plx_stack_description {
  uint32_t struct_size;
  uint32_t num_layers;       /* physical layers, all of them (main decoder and MTP blocks) */
  uint32_t num_logical;      /* logical layers of the main decoder */
  uint32_t num_segments;     /* pipeline segments of the main decoder (1 without '|') */
  uint32_t mtp_depths;       /* multi-token-prediction blocks (0 without '/') */
  uint32_t reserved;
  /* num_layers entries: the main decoder in forward order, then each MTP block's. An array of
   * pointers so plx_stack_layer may grow. */
  const plx_stack_layer* const* layers;
  const char* final_norm_prefix; /* the final norm's checkpoint prefix: "decoder.final_layernorm." */
  /* Other spellings of the final norm's prefix that loading accepts ("decoder.final_norm."), separated by ';'. */
  const char* final_norm_aliases;
  /* ABI 1.6: the decoder in the stack's own words, for messages that must say which model a
   * config or a checkpoint describes: "the GPT of 4 layers", "the pattern \"M*M-\"". NULL (a
   * stack built before 1.6): the engine says "the decoder of N layers (<stack>)". */
  const char* summary;
  /* ABI 1.6: the keys of the model section the decoder's layout is spelled by, ';'-separated
   * ("num_layers;pattern"): two configs whose described layouts agree are the same decoder
   * whatever these keys say (a GPT of 4 layers and the pattern "[*-][*-][*-][*-]"), so a resume
   * compares the layout instead of them. NULL: none. */
  const char* layout_keys;
} plx_stack_description;

typedef struct plx_stack_v1 {
  uint32_t struct_size;
  uint32_t reserved;
  plx_status (*create)(const plx_stack_create_args* args, void** out_stack);
  void (*destroy)(void* stack);
  /* The decoder's description; it stays valid and unchanged until destroy. */
  plx_status (*describe)(void* stack, const plx_stack_description** out);
} plx_stack_v1;

PLX_PIN_SIZE(plx_stack_create_args, 24);
PLX_PIN_OFFSET(plx_stack_layer, symbol, 24);
PLX_PIN_OFFSET(plx_stack_layer, connection_prefix, 64);
PLX_PIN_OFFSET(plx_stack_layer, kind, 72); /* ABI 1.6 */
PLX_PIN_SIZE(plx_stack_layer, 80);
PLX_PIN_OFFSET(plx_stack_description, layers, 24);
PLX_PIN_OFFSET(plx_stack_description, summary, 48); /* ABI 1.6 */
PLX_PIN_OFFSET(plx_stack_description, layout_keys, 56); /* ABI 1.6 */
PLX_PIN_SIZE(plx_stack_description, 64);
PLX_PIN_OFFSET(plx_stack_v1, describe, 24);
PLX_PIN_SIZE(plx_stack_v1, 32);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_STACK_H */
