// plexus_kernels: token embedding lookup and its gradient.
#pragma once

#include <cstdint>

namespace plexus::kernels {

// The index of the first id outside [0, vocab) (ids equal to `ignore` are allowed when
// allow_ignore), or -1 when all are valid.
int64_t first_invalid_id(int64_t n, const int32_t* ids, int64_t vocab, bool allow_ignore = false,
                         int32_t ignore = -1);

// out[i, :] = weight[ids[i], :]; ids must be valid. out: [n, dim]; weight: [vocab, dim].
template <class T>
void embedding_forward(int64_t n, int64_t dim, const int32_t* ids, const T* weight, T* out);

// dweight[ids[i], :] += dout[i, :] (accumulated). Parallel over column slices, so repeated ids
// never race and the sum order is the token order (deterministic).
template <class T>
void embedding_backward(int64_t n, int64_t dim, const int32_t* ids, const T* dout, T* dweight);

}  // namespace plexus::kernels
