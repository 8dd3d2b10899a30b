#include "tensors.hpp"

#include <optional>
#include <string>

#include "plexus/cpp/tensor.hpp"
#include "support.hpp"

namespace plexus::comm_nccl {
namespace {

// The dtypes NCCL reduces (and moves as themselves).
std::optional<ncclDataType_t> native_type(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 32) return ncclFloat32;
      if (t.bits == 64) return ncclFloat64;
      if (t.bits == 16) return ncclFloat16;
      break;
    case kDLBfloat:
      if (t.bits == 16) return ncclBfloat16;
      break;
    case kDLInt:
      if (t.bits == 32) return ncclInt32;
      if (t.bits == 64) return ncclInt64;
      break;
    case kDLUInt:
      if (t.bits == 8) return ncclUint8;
      break;
    default:
      break;
  }
  return std::nullopt;
}

std::string dtype_text(DLDataType t) {
  std::string name = plexus::sdk::dtype_name(t);
  if (t.lanes != 1) name += 'x' + std::to_string(t.lanes);
  return name;
}

}  // namespace

Buffer buffer_of(const DLTensor* tensor, int device, Use use, const char* what) {
  const std::string where = what;
  if (tensor == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, where + " is null");
  if (tensor->device.device_type != kDLCUDA || tensor->device.device_id != device)
    throw Error(PLX_ERR_UNSUPPORTED,
                where + " is on " + device_text(tensor->device) +
                    ", but this NCCL communicator runs on cuda:" + std::to_string(device) +
                    " (nccl communicates CUDA memory of the communicator's own GPU)");
  if (!plx_is_contiguous(tensor))
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                where + " is not contiguous (comm backends take compact row-major tensors)");
  const int64_t numel = plx_numel(tensor);
  if (numel < 0) throw Error(PLX_ERR_INVALID_ARGUMENT, where + " has a negative dimension");
  Buffer b;
  b.dtype = tensor->dtype;
  if (const std::optional<ncclDataType_t> native = native_type(tensor->dtype)) {
    b.type = *native;
  } else if (use == Use::reduce) {
    throw Error(PLX_ERR_UNSUPPORTED,
                where + ": nccl cannot reduce " + dtype_text(tensor->dtype) +
                    " (it reduces float32, float64, float16, bfloat16, int32, int64 and uint8)");
  } else if (const std::size_t bits = std::size_t{tensor->dtype.bits} * tensor->dtype.lanes;
             bits != 0 && bits % 8 == 0) {
    b.type = ncclUint8;
    b.scale = bits / 8;
  } else {
    throw Error(PLX_ERR_UNSUPPORTED, where + ": nccl cannot move " + dtype_text(tensor->dtype) +
                                         " (its elements are not whole bytes)");
  }
  b.count = static_cast<std::size_t>(numel) * b.scale;
  b.data = b.count == 0 ? tensor->data : plx_data(tensor);
  if (b.count != 0 && tensor->data == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, where + " has no data");
  return b;
}

void expect_same_dtype(const Buffer& a, const Buffer& b) {
  if (!plx_dtype_equal(a.dtype, b.dtype))
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "send is " + dtype_text(a.dtype) + " but recv is " + dtype_text(b.dtype));
}

ncclRedOp_t reduce_op(int32_t op) {
  switch (op) {
    case PLX_REDUCE_SUM:
      return ncclSum;
    case PLX_REDUCE_AVG:
      return ncclAvg;
    case PLX_REDUCE_MAX:
      return ncclMax;
    case PLX_REDUCE_MIN:
      return ncclMin;
    default:
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "unknown reduction " + std::to_string(op) + " (PLX_REDUCE_SUM, _AVG, _MAX or _MIN)");
  }
}

}  // namespace plexus::comm_nccl
