// A build without CUDA: the layer refuses a CUDA device when it is created (moe_layer.cpp), so
// the factory is never reached; it exists to keep the layer free of #if.
#include <string>

#include "device_impl.hpp"
#include "plexus/cpp/error.hpp"
#include "plexus/cpp/tensor.hpp"

namespace plexus::moe {

bool cuda_built() noexcept {
  return false;
}

std::unique_ptr<MoeDevice> make_cuda_moe(const MoeConfig& /*config*/, DLDevice device) {
  throw plexus::sdk::Error(PLX_ERR_UNSUPPORTED,
                           std::string(kComponent) +
                               " runs on the CPU only: this plugin was built without CUDA (" +
                               plexus::sdk::device_text(device) + " requested)");
}

}  // namespace plexus::moe
