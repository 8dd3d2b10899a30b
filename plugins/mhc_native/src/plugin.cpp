// The mhc_native plugin: one fusion backend, "mhc_native", of family "mhc" for the CPU and, in a
// build with CUDA, for CUDA GPUs. Its primitives live in one file per pair (src/*.cpp for the
// CPU, src/cuda/ for CUDA); the SDK's scaffold (plexus/cpp/mhc_backend.hpp) routes each call to
// the device its tensors are on, picks the dtype and refuses what the backend does not run.
#include "plexus/cpp/plugin.hpp"
#include "native.hpp"
#include "plexus/cpp/mhc_backend.hpp"
#include "plexus_mhc_backend/plugin_init.hpp"
#if PLEXUS_MHC_HAVE_CUDA
#include "cuda/primitives.hpp"
#include "plexus_mhc_backend/cuda_instance.hpp"
#endif

namespace plexus::mhc_native {
namespace {

struct NativeKernels {
  static constexpr const char* name = "mhc_native";
  template <class T>
  using Cpu = CpuPrimitives<T>;
#if PLEXUS_MHC_HAVE_CUDA
  // One per GPU, with its cuBLAS handle (fp32 products without TF32, like the CPU) and scratch.
  using Cuda = plexus::mhc_backend::MhcCudaInstance<gpu::CudaPrimitives, float>;
#endif
};
using NativeMhc = plexus::sdk::MhcBackendScaffold<NativeKernels>;

constexpr const char* kSchema =
    R"({"type": "object", "doc": "mhc_native has no options.", "properties": {}})";

const plx_component_desc kComponent = NativeMhc::component(
    NativeMhc::runs_on_cuda
        ? "mHC reference: each step of the formulas as its own pass (CPU: float32, float64; CUDA: float32)"
        : "mHC reference: each step of the formulas as its own pass (CPU; float32, float64)",
    kSchema);

}  // namespace
}  // namespace plexus::mhc_native

PLEXUS_PLUGIN_WITH_INIT("mhc_native", "1.0.0",
                        "mHC (manifold-constrained hyper-connections) reference backend for the CPU",
                        &plexus::mhc_backend::init_plugin, &plexus::mhc_native::kComponent)
