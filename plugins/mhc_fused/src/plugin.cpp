// The mhc_fused plugin: one fusion backend, "mhc_fused", of family "mhc" for the CPU and, in a
// build with CUDA, for CUDA GPUs. Its primitives live in one file per pair (src/*.cpp for the
// CPU, src/cuda/ for CUDA); the SDK's scaffold (plexus/cpp/mhc_backend.hpp) routes each call to
// the device its tensors are on, picks the dtype and refuses what the backend does not run
// (another device; bfloat16 on the CPU, float64 on a GPU).
#include "plexus/cpp/plugin.hpp"
#include "fused.hpp"
#include "plexus/cpp/mhc_backend.hpp"
#include "plexus_mhc_backend/plugin_init.hpp"
#if PLEXUS_MHC_HAVE_CUDA
#include "cuda/primitives.hpp"
#include "plexus_mhc_backend/cuda_instance.hpp"
#endif

namespace plexus::mhc_fused {
namespace {

#if PLEXUS_MHC_HAVE_CUDA
// One per GPU. Its Handle's cuBLAS workspace stays small: no call here uses cuBLAS (the products
// are this plugin's own kernels); the Handle is for the stream binding and the device scratch.
class FusedCuda : public plexus::mhc_backend::MhcCudaInstance<gpu::CudaPrimitives, float, gpu::bfloat16> {
 public:
  FusedCuda(const char* backend, int device_id) : MhcCudaInstance(backend, device_id, handle_options()) {}

 private:
  static cuda_kernels::HandleOptions handle_options() {
    cuda_kernels::HandleOptions options;
    options.blas_workspace_bytes = std::size_t{1} << 20;
    return options;
  }
};
#endif

struct FusedKernels {
  static constexpr const char* name = "mhc_fused";
  template <class T>
  using Cpu = CpuPrimitives<T>;
#if PLEXUS_MHC_HAVE_CUDA
  using Cuda = FusedCuda;
#endif
};
using FusedMhc = plexus::sdk::MhcBackendScaffold<FusedKernels>;

constexpr const char* kSchema = R"({"type": "object", "doc": "mhc_fused has no options.", "properties": {}})";

const plx_component_desc kComponent = FusedMhc::component(
    FusedMhc::runs_on_cuda
        ? "mHC with the fewest passes over memory: fused, multithreaded, vectorized (CPU: float32, "
          "float64; CUDA: float32, bfloat16)"
        : "mHC with the fewest passes over memory: fused, multithreaded, vectorized (CPU; float32, float64)",
    kSchema);

}  // namespace
}  // namespace plexus::mhc_fused

PLEXUS_PLUGIN_WITH_INIT(
    "mhc_fused", "1.0.0",
    "mHC (manifold-constrained hyper-connections) fused backend for the CPU and CUDA GPUs",
    &plexus::mhc_backend::init_plugin, &plexus::mhc_fused::kComponent)
