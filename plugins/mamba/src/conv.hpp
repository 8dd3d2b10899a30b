// The causal depthwise convolution of x, B and C along the sequence, with its bias and SiLU, as
// Megatron's conv1d runs it (padding W - 1 on the left, the first L outputs kept):
//   v[t, c] = bias[c] + sum_{k < W} w[c, k] in[t - (W - 1) + k, c]   (zero before the sequence start)
//   out[t, c] = silu(v[t, c]) = v sigmoid(v)
// w[c, W - 1] multiplies the current token. Rows are tokens, [batch * seq]; each sequence of the
// batch is convolved on its own.
#pragma once

#include <cstdint>

namespace plexus::mamba {

struct ConvShape {
  int64_t batch = 0, seq = 0, channels = 0, width = 0;
};

// in: the channels of row r at in[r * ld_in + c]; w: [channels, width]; bias: [channels];
// out: [rows, channels], written; pre (may be null): v, [rows, channels], written.
template <class T>
void conv_silu_forward(const ConvShape& shape, const T* in, int64_t ld_in, const T* w, const T* bias, T* out,
                       T* pre);

// dout: the gradient of out. In one pass over the rows (v recomputed from the input, W - 1 rows
// more per block of 128): din [rows, ld_din] (channels columns) is written; dw [channels, width]
// and dbias [channels] are accumulated (+=) and may be null.
template <class T>
void conv_silu_backward(const ConvShape& shape, const T* in, int64_t ld_in, const T* w, const T* bias,
                        const T* dout, T* din, int64_t ld_din, T* dw, T* dbias);

}  // namespace plexus::mamba
