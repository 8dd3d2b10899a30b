// A build without CUDA: the layer refuses a CUDA device when it is created (mixer_layer.cpp), so
// the factory is never reached; it exists to keep the layer free of #if.
#include <string>

#include "device_impl.hpp"
#include "plexus/cpp/error.hpp"
#include "plexus/cpp/tensor.hpp"

namespace plexus::mamba {

bool cuda_built() noexcept {
  return false;
}

std::unique_ptr<MixerDevice> make_cuda_mixer(const MixerConfig& /*config*/, DLDevice device) {
  throw plexus::sdk::Error(PLX_ERR_UNSUPPORTED,
                           std::string(kComponent) +
                               " runs on the CPU only: this plugin was built without CUDA (" +
                               plexus::sdk::device_text(device) + " requested)");
}

}  // namespace plexus::mamba
