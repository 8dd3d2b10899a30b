// The mean token cross-entropy over a vocabulary split over the tp group (Megatron's
// vocab_parallel_cross_entropy): each rank holds the logits of its columns of the padded
// vocabulary, [first_col, first_col + cols). A row's max, its sum of exponentials and its target's
// logit are summed (the max maxed) over tp, so every rank gets the whole vocabulary's loss and its
// own columns of softmax - onehot, without any rank holding a whole row of logits.
#pragma once

#include <cstdint>

#include "plexus/cpp/group.hpp"
#include "plexus_kernels/cross_entropy.hpp"

namespace plexus::transformer {

// logits [rows, cols] (this rank's columns); targets [rows], global ids or `ignore`. When grad is
// not null it is written [rows, cols] with this rank's columns of softmax(row) - onehot(target)
// for counted rows and zeros for ignored ones (the caller scales by dL/dloss / count).
template <class T>
kernels::CrossEntropyResult vocab_parallel_cross_entropy(const plexus::sdk::Group& tp, int64_t rows,
                                                         int64_t cols, int64_t first_col, const T* logits,
                                                         const int32_t* targets, T* grad, int32_t ignore);

}  // namespace plexus::transformer
