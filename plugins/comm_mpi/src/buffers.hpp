// Tensor arguments as MPI sees them: checked views (CPU, contiguous, whole-byte elements), the
// MPI datatype and operator of a reduction, and the division that turns a sum into an average.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "plexus/cpp/tensor.hpp"
#include "plexus/tensor.h"
#include "runtime.hpp"

namespace plexus::comm_mpi {

struct View {
  std::byte* data = nullptr;  // first element (byte_offset applied)
  int64_t numel = 0;
  std::size_t element_size = 0;  // bytes
  DLDataType dtype{};

  std::byte* at(int64_t element) const { return data + element * static_cast<int64_t>(element_size); }
  int64_t bytes() const { return numel * static_cast<int64_t>(element_size); }
  // True when the byte ranges of two non-empty views intersect.
  bool overlaps(const View& other) const {
    return bytes() > 0 && other.bytes() > 0 && data < other.data + other.bytes() &&
           other.data < data + bytes();
  }
};

// Checks one tensor argument of `call` ("all_reduce (world, 2 ranks)"), named `what` ("send").
View view_of(const DLTensor* tensor, const char* what, const std::string& call);
// Throws unless both views have the same dtype.
void expect_same_dtype(const View& send, const View& recv, const std::string& call);
// Throws unless `count` elements fit MPI's int counts (`what`: "elements per rank").
void expect_int_count(int64_t count, const std::string& what, const std::string& call);

struct Reduction {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  bool average = false;  // PLX_REDUCE_AVG: a sum, divided by the group size afterwards
};
// The reduction of `op` (PLX_REDUCE_*) over `dtype`, or Error naming what is not supported.
Reduction reduction_for(Runtime& runtime, DLDataType dtype, int32_t op, const std::string& call);
// Divides every element by `divisor` (integers truncate toward zero, as C does).
void divide(const View& view, int32_t divisor);

using plexus::sdk::device_text;

}  // namespace plexus::comm_mpi
