// plexus_kernels: softmax cross-entropy over rows of logits.
#pragma once

#include <cstdint>

namespace plexus::kernels {

struct CrossEntropyResult {
  double loss_sum = 0;  // sum over counted rows of logsumexp(row) - row[target]
  int64_t count = 0;    // rows whose target is not `ignore`
};

// logits: [rows, vocab]; targets: [rows], valid or equal to `ignore` (such rows are not counted).
// When grad is not null it is written [rows, vocab] with softmax(row) - onehot(target) for counted
// rows and zeros for ignored ones (the caller scales by dL/dloss / count).
template <class T>
CrossEntropyResult cross_entropy_forward(int64_t rows, int64_t vocab, const T* logits, const int32_t* targets,
                                         T* grad, int32_t ignore = -1);

}  // namespace plexus::kernels
