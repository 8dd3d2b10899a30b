// What each layer tells its device implementation: the sizes and choices it read and checked
// from the model section, plus the LayerSpec every implementation gets (component, device,
// parameter specs). Plain values, copied into the implementation at creation.
#pragma once

#include <cstdint>
#include <vector>

#include "common.hpp"
#include "device_impl.hpp"

namespace plexus::transformer {

struct EmbeddingSpec : LayerSpec {
  int64_t vocab = 0, hidden = 0;
};

// Where the two projections of a pre-norm layer (attention, MLP: f = out(core(in(norm(x))))) are:
// W_in [in_rows, C] is parameter in_index, after the norm's weight (and bias), and W_out
// [C, mid_cols] the next one.
struct Projections {
  uint32_t in_index = 1;
  int64_t in_rows = 0;   // the input projection's output width
  int64_t mid_cols = 0;  // the core's output width: the output projection's input
};

// The tokens of a pre-norm layer's call: batch x seq = n rows of the hidden states.
struct Tokens {
  int64_t batch = 0, seq = 0, n = 0;
};

// What a pre-norm layer tells its device implementation besides its core's settings (the CPU
// path's PreNormLayer::fill_spec, prenorm_layer.hpp; read by cuda/prenorm_cuda_layer.hpp).
struct PreNormSpec : LayerSpec {
  int64_t hidden = 0;
  NormSpec norm;
  Projections projections;
};

// model.attention_backend: which kernel computes the attention core on a GPU.
enum class AttentionBackend { automatic, flash, unfused };

// projections: in = qkv, (heads + 2 groups) head_dim wide; mid = the attention output, heads head_dim.
struct AttentionSpec : PreNormSpec {
  AttentionBackend backend = AttentionBackend::automatic;
  int64_t heads = 0, groups = 0, head_dim = 0;
  int64_t max_seq = 0;  // seq_length: the size of the rotary tables
  double rope_base = 10000;
  std::vector<int64_t> rope_columns;  // first column of every rotated head in a qkv row
};

// projections: in = a, fc1's output, ffn (gelu) or 2 ffn (swiglu) wide; mid = act, ffn wide.
struct MlpSpec : PreNormSpec {
  bool swiglu = false;
};

struct NormLayerSpec : LayerSpec {
  int64_t hidden = 0;
  NormSpec norm;
};

struct HeadSpec : LayerSpec {
  int64_t vocab = 0, hidden = 0;
  int64_t rows = 0;  // the output layer's rows, the padded vocabulary (targets stay below vocab)
};

}  // namespace plexus::transformer
