// A build without CUDA: expect_supported_device refuses CUDA units before any of these runs.
#include "device_ops.hpp"
#include "plexus/cpp/error.hpp"

namespace fsdp::cuda {

namespace {
[[noreturn]] void absent() {
  throw plexus::sdk::Error(PLX_ERR_UNSUPPORTED, "this fsdp plugin was built without CUDA");
}
}  // namespace

bool available() noexcept { return false; }
void copy(int32_t, float*, const float*, int64_t) { absent(); }
void zero(int32_t, float*, int64_t) { absent(); }
void add(int32_t, float*, const float*, int64_t) { absent(); }
void scale(int32_t, float*, float, int64_t) { absent(); }

}  // namespace fsdp::cuda
