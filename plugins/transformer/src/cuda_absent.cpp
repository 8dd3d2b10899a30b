// A build without CUDA: the layers refuse a CUDA device when they are created (common.cpp), so
// these factories are never reached; they exist to keep the layers free of #if.
#include "cuda_layers.hpp"

namespace plexus::transformer {
namespace {
[[noreturn]] void refuse(const LayerSpec& spec) {
  throw Error(PLX_ERR_UNSUPPORTED, std::string(spec.component) +
                                       " runs on the CPU only: this plugin was built without CUDA (" +
                                       device_text(spec.device) + " requested)");
}
}  // namespace

bool cuda_built() noexcept {
  return false;
}

std::unique_ptr<DeviceImpl> make_cuda_embedding(const EmbeddingSpec& spec) {
  refuse(spec);
}
std::unique_ptr<DeviceImpl> make_cuda_attention(const AttentionSpec& spec) {
  refuse(spec);
}
std::unique_ptr<DeviceImpl> make_cuda_mlp(const MlpSpec& spec) {
  refuse(spec);
}
std::unique_ptr<DeviceImpl> make_cuda_norm(const NormLayerSpec& spec) {
  refuse(spec);
}
std::unique_ptr<DeviceImpl> make_cuda_lm_head(const HeadSpec& spec) {
  refuse(spec);
}

}  // namespace plexus::transformer
