#include "plexus_cuda_layer/context.hpp"

#include <string>

#include "plexus/cpp/error.hpp"
#include "plexus/cpp/host.hpp"
#include "plexus/cpp/tensor.hpp"

namespace plexus::cuda_layer {
namespace {

// The refusal of a GPU this process does not have, e.g. a CUDA build on a machine without one.
void expect_visible(const char* component, DLDevice device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  std::string why;
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // not sticky: later CUDA calls must not report it
    why = std::string(" (cudaGetDeviceCount: ") + cudaGetErrorString(status) + ")";
    count = 0;
  }
  if (device.device_id < 0 || device.device_id >= count)
    throw plexus::sdk::Error(PLX_ERR_UNSUPPORTED,
                             std::string(component) + " cannot run on " + plexus::sdk::device_text(device) +
                                 ": this process sees " + std::to_string(count) + " CUDA device(s)" + why +
                                 (count == 0 ? "; without a GPU it runs on the CPU only" : ""));
}

}  // namespace

cudaStream_t native_stream(plx_stream stream) {
  return static_cast<cudaStream_t>(plexus::sdk::Host::current().stream_native(stream));
}

Context::Context(const char* component, DLDevice device) : device_(device) {
  expect_visible(component, device);
  const cuda_kernels::CurrentDevice guard(device.device_id);
  handle_.emplace();  // default options: TF32 off, so float32 products match the CPU's
}

Context::~Context() {
  try {
    const cuda_kernels::CurrentDevice guard(device_.device_id);
    handle_.reset();
  } catch (...) {  // the device is gone: release what can be released without it
    handle_.reset();
  }
}

Context::Scope::Scope(Context& context, plx_stream stream)
    : context_(context), lock_(context.mutex_), guard_(context.device_.device_id) {
  context_.handle_->set_stream(native_stream(stream));
}

}  // namespace plexus::cuda_layer
