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

// The same over a vocabulary split into column blocks, one per rank (tensor parallelism): this
// rank holds logits [rows, cols] of the columns [first_col, first_col + cols). Three phases, the
// caller reducing over the ranks between them (max, then sum):
//   split_cross_entropy_max: each row's max over this rank's columns into `max` [rows];
//   split_cross_entropy_sums: with the rows' max over every rank, the sums of exp(logit - max)
//     into sums[0, rows) and each target's logit (0 where another rank holds it) into
//     sums[rows, 2 rows); grad (when not null) gets the exponentials;
//   split_cross_entropy_finish: with both summed over every rank, the loss of the counted rows and,
//     when grad is not null, this rank's columns of softmax - onehot (zeros for ignored rows).
template <class T>
void split_cross_entropy_max(int64_t rows, int64_t cols, const T* logits, T* max);
template <class T>
void split_cross_entropy_sums(int64_t rows, int64_t cols, int64_t first_col, const T* logits,
                              const int32_t* targets, const T* max, T* grad, T* sums, int32_t ignore = -1);
template <class T>
CrossEntropyResult split_cross_entropy_finish(int64_t rows, int64_t cols, int64_t first_col,
                                              const int32_t* targets, const T* max, const T* sums, T* grad,
                                              int32_t ignore = -1);

}  // namespace plexus::kernels
