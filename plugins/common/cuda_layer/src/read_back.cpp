#include "plexus_cuda_layer/read_back.hpp"

#include "plexus_cuda_kernels/error.hpp"

namespace plexus::cuda_layer {

template <class T>
T read_back(const T* value, cudaStream_t stream) {
  T host{};
  PLEXUS_CUDA_CHECK(cudaMemcpyAsync(&host, value, sizeof(T), cudaMemcpyDeviceToHost, stream), "read_back");
  PLEXUS_CUDA_CHECK(cudaStreamSynchronize(stream), "read_back");
  return host;
}
template int64_t read_back<int64_t>(const int64_t*, cudaStream_t);
template int32_t read_back<int32_t>(const int32_t*, cudaStream_t);

}  // namespace plexus::cuda_layer
