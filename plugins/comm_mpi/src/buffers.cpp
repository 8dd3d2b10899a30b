// Checks of tensor arguments and the reductions' datatypes; see buffers.hpp.
#include "buffers.hpp"

#include <climits>

#include "bf16.hpp"
#include "plexus/cpp/error.hpp"
#include "plexus/cpp/tensor.hpp"

namespace plexus::comm_mpi {
namespace {

using plexus::sdk::dtype_name;
using plexus::sdk::Error;

template <class T>
void divide_as(const View& view, int32_t divisor) {
  auto* values = reinterpret_cast<T*>(view.data);
  const T d = static_cast<T>(divisor);
  for (int64_t i = 0; i < view.numel; ++i) values[i] = static_cast<T>(values[i] / d);
}

}  // namespace

View view_of(const DLTensor* tensor, const char* what, const std::string& call) {
  const std::string name = call + ": " + what;
  if (tensor == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, name + " is NULL");
  if (tensor->device.device_type != kDLCPU)
    throw Error(PLX_ERR_UNSUPPORTED, name + " is on " + device_text(tensor->device) +
                                         "; the mpi backend moves CPU tensors (nccl moves GPU memory)");
  if (tensor->ndim < 0 || (tensor->ndim > 0 && tensor->shape == nullptr))
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                name + " has no valid shape (ndim " + std::to_string(tensor->ndim) + ")");
  for (int i = 0; i < tensor->ndim; ++i)
    if (tensor->shape[i] < 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  name + " has a negative dimension " + std::to_string(tensor->shape[i]));
  if (plx_is_contiguous(tensor) == 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT, name + " is not contiguous (row-major, compact strides required)");
  const DLDataType dtype = tensor->dtype;
  const uint64_t bits = static_cast<uint64_t>(dtype.bits) * dtype.lanes;
  if (bits == 0 || bits % 8 != 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                name + ": dtype " + dtype_name(dtype) + " is not a whole number of bytes per element");
  View view;
  view.numel = plx_numel(tensor);
  view.element_size = static_cast<std::size_t>(bits / 8);
  view.dtype = dtype;
  view.data = static_cast<std::byte*>(plx_data(tensor));
  if (tensor->data == nullptr && view.numel > 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                name + " has " + std::to_string(view.numel) + " elements but no data");
  return view;
}

void expect_same_dtype(const View& send, const View& recv, const std::string& call) {
  if (!plx_dtype_equal(send.dtype, recv.dtype) || send.element_size != recv.element_size)
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send is " + dtype_name(send.dtype) + " but recv is " +
                                              dtype_name(recv.dtype) + " (they must have the same dtype)");
}

void expect_int_count(int64_t count, const std::string& what, const std::string& call) {
  if (count > INT_MAX)
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": " + std::to_string(count) + " " + what +
                                              " exceed MPI's count limit (" + std::to_string(INT_MAX) +
                                              "); split the transfer");
}

Reduction reduction_for(Runtime& runtime, DLDataType dtype, int32_t op, const std::string& call) {
  if (op < PLX_REDUCE_SUM || op > PLX_REDUCE_MIN)
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": op " + std::to_string(op) +
                                              " is not a PLX_REDUCE_* value (0 sum, 1 avg, 2 max, 3 min)");
  Reduction r;
  r.average = op == PLX_REDUCE_AVG;
  r.op = op == PLX_REDUCE_MAX ? MPI_MAX : op == PLX_REDUCE_MIN ? MPI_MIN : MPI_SUM;
  if (dtype.lanes == 1) {
    switch (dtype.code) {
      case kDLFloat:
        if (dtype.bits == 32) r.type = MPI_FLOAT;
        if (dtype.bits == 64) r.type = MPI_DOUBLE;
        break;
      case kDLInt:
        if (dtype.bits == 8) r.type = MPI_INT8_T;
        if (dtype.bits == 16) r.type = MPI_INT16_T;
        if (dtype.bits == 32) r.type = MPI_INT32_T;
        if (dtype.bits == 64) r.type = MPI_INT64_T;
        break;
      case kDLUInt:
        if (dtype.bits == 8) r.type = MPI_UINT8_T;
        if (dtype.bits == 16) r.type = MPI_UINT16_T;
        if (dtype.bits == 32) r.type = MPI_UINT32_T;
        if (dtype.bits == 64) r.type = MPI_UINT64_T;
        break;
      case kDLBfloat:
        if (dtype.bits == 16) {
          r.type = MPI_UINT16_T;  // the bits; the user-defined operator reads them as bfloat16
          r.op = runtime.bf16_op(op);
        }
        break;
      default:
        break;
    }
  }
  if (r.type == MPI_DATATYPE_NULL)
    throw Error(PLX_ERR_UNSUPPORTED,
                call + ": the mpi backend cannot reduce " + dtype_name(dtype) +
                    (dtype.lanes != 1 ? " x" + std::to_string(dtype.lanes) : std::string()) +
                    " (it reduces float32, float64, bfloat16 and 8- to 64-bit integers)");
  return r;
}

void divide(const View& view, int32_t divisor) {
  if (divisor == 1) return;
  const DLDataType t = view.dtype;
  if (t.code == kDLFloat && t.bits == 32) return divide_as<float>(view, divisor);
  if (t.code == kDLFloat && t.bits == 64) return divide_as<double>(view, divisor);
  if (t.code == kDLInt && t.bits == 8) return divide_as<int8_t>(view, divisor);
  if (t.code == kDLInt && t.bits == 16) return divide_as<int16_t>(view, divisor);
  if (t.code == kDLInt && t.bits == 32) return divide_as<int32_t>(view, divisor);
  if (t.code == kDLInt && t.bits == 64) return divide_as<int64_t>(view, divisor);
  if (t.code == kDLUInt && t.bits == 8) return divide_as<uint8_t>(view, divisor);
  if (t.code == kDLUInt && t.bits == 16) return divide_as<uint16_t>(view, divisor);
  if (t.code == kDLUInt && t.bits == 32) return divide_as<uint32_t>(view, divisor);
  if (t.code == kDLUInt && t.bits == 64) return divide_as<uint64_t>(view, divisor);
  if (t.code == kDLBfloat && t.bits == 16) {
    auto* values = reinterpret_cast<uint16_t*>(view.data);
    const float d = static_cast<float>(divisor);
    for (int64_t i = 0; i < view.numel; ++i) values[i] = float_to_bf16(bf16_to_float(values[i]) / d);
    return;
  }
  throw Error(PLX_ERR_INTERNAL, "no average for " + dtype_name(t));
}

}  // namespace plexus::comm_mpi
