// Memory and streams for plugins. The CPU is complete; GPU devices arrive with the CUDA
// runtime, and until then a request for one is a clear UNSUPPORTED error.
#include <cstdlib>
#include <memory>
#include <string>

#include "host_services/host_functions.hpp"
#include "host_services/last_error.hpp"

struct plx_stream_s {
  DLDevice device;
};
struct plx_event_s {
  DLDevice device;
};

namespace plexus::detail {
namespace {

constexpr uint64_t kDefaultAlignment = 64;  // a cache line, and enough for AVX-512 loads

std::string device_name(DLDevice device) {
  const char* type = device.device_type == kDLCPU    ? "cpu"
                     : device.device_type == kDLCUDA ? "cuda"
                                                     : "device-type-";
  std::string name = type;
  if (device.device_type != kDLCPU && device.device_type != kDLCUDA)
    name += std::to_string(static_cast<int>(device.device_type));
  return name + ":" + std::to_string(device.device_id);
}

plx_status unsupported_device(DLDevice device) {
  return fail(PLX_ERR_UNSUPPORTED, "device " + device_name(device) +
                                       " is not available in this host (it runs on the CPU only)");
}

plx_status host_alloc(void*, DLDevice device, uint64_t bytes, uint64_t alignment, void** out) {
  if (out == nullptr) return fail(PLX_ERR_INVALID_ARGUMENT, "alloc: null output pointer");
  *out = nullptr;
  if (device.device_type != kDLCPU) return unsupported_device(device);
  if (alignment == 0) alignment = kDefaultAlignment;
  if ((alignment & (alignment - 1)) != 0)
    return fail(PLX_ERR_INVALID_ARGUMENT, "alloc: alignment " + std::to_string(alignment) + " is not a power of two");
  if (alignment < kDefaultAlignment) alignment = kDefaultAlignment;
  // aligned_alloc needs a size that is a multiple of the alignment; zero bytes still gets a
  // unique pointer so free() works uniformly.
  const uint64_t rounded = bytes == 0 ? alignment : (bytes + alignment - 1) / alignment * alignment;
  void* ptr = std::aligned_alloc(alignment, rounded);
  if (ptr == nullptr)
    return fail(PLX_ERR_OUT_OF_MEMORY, "alloc: could not allocate " + std::to_string(bytes) + " bytes on cpu:0");
  *out = ptr;
  return PLX_OK;
}

void host_free(void*, DLDevice device, void* ptr) {
  if (device.device_type == kDLCPU) std::free(ptr);
}

plx_status stream_create(void*, DLDevice device, int32_t, plx_stream* out) {
  if (device.device_type != kDLCPU) return unsupported_device(device);
  *out = std::make_unique<plx_stream_s>(plx_stream_s{device}).release();  // freed by stream_destroy
  return PLX_OK;
}
void stream_destroy(void*, plx_stream stream) { std::unique_ptr<plx_stream_s> owned(stream); }
// CPU streams execute work in order on the calling thread: everything is already complete.
plx_status stream_synchronize(void*, plx_stream) { return PLX_OK; }
plx_status stream_native(void*, plx_stream, void** out) {
  *out = nullptr;
  return PLX_OK;
}
plx_status event_create(void*, DLDevice device, plx_event* out) {
  if (device.device_type != kDLCPU) return unsupported_device(device);
  *out = std::make_unique<plx_event_s>(plx_event_s{device}).release();  // freed by event_destroy
  return PLX_OK;
}
void event_destroy(void*, plx_event event) { std::unique_ptr<plx_event_s> owned(event); }
plx_status event_record(void*, plx_event, plx_stream) { return PLX_OK; }
plx_status stream_wait_event(void*, plx_stream, plx_event) { return PLX_OK; }
plx_status event_synchronize(void*, plx_event) { return PLX_OK; }

}  // namespace

void fill_memory_functions(plx_host_api& api) {
  api.alloc = &host_alloc;
  api.free = &host_free;
}

void fill_stream_functions(plx_host_api& api) {
  api.stream_create = &stream_create;
  api.stream_destroy = &stream_destroy;
  api.stream_synchronize = &stream_synchronize;
  api.stream_native = &stream_native;
  api.event_create = &event_create;
  api.event_destroy = &event_destroy;
  api.event_record = &event_record;
  api.stream_wait_event = &stream_wait_event;
  api.event_synchronize = &event_synchronize;
}

}  // namespace plexus::detail
