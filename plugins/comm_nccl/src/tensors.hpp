// What a call's tensors mean to NCCL: the element type, the count in NCCL elements and the
// address, after checking what comm.h promises (contiguous, on this communicator's GPU).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>

#include "plexus/tensor.h"

namespace plexus::comm_nccl {

// A tensor as NCCL sees it. Types NCCL has are passed as themselves; for data movement
// (all_gather, broadcast, send/recv, all_to_all_v) any other whole-byte dtype is moved as
// uint8 with `scale` bytes per element.
struct Buffer {
  void* data = nullptr;
  ncclDataType_t type = ncclUint8;
  std::size_t count = 0;  // in NCCL elements
  std::size_t scale = 1;  // NCCL elements per tensor element
  DLDataType dtype{};
};

enum class Use { reduce, move };

// Checks `tensor` (named `what`, e.g. "recv") and returns its NCCL view. Throws Error naming the
// tensor (the boundary's guard prefixes the call): PLX_ERR_UNSUPPORTED for a device other than cuda:`device`
// or a dtype NCCL cannot reduce, PLX_ERR_INVALID_ARGUMENT for a null or non-contiguous tensor.
Buffer buffer_of(const DLTensor* tensor, int device, Use use, const char* what);

// Throws PLX_ERR_INVALID_ARGUMENT unless both have the same dtype.
void expect_same_dtype(const Buffer& a, const Buffer& b);

// PLX_REDUCE_* -> ncclRedOp_t (AVG is ncclAvg: the sum divided by the group size).
ncclRedOp_t reduce_op(int32_t op);

}  // namespace plexus::comm_nccl
