// The build has the CUDA path (src/cuda_absent.cpp is its counterpart in a build without CUDA).
#include "cuda_layers.hpp"

namespace plexus::transformer {

bool cuda_built() noexcept {
  return true;
}

}  // namespace plexus::transformer
