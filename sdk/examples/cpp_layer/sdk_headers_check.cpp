// Not part of the example plugin: a compile-only check that every C++ helper header of the SDK
// builds with this project's compiler, standard library and C++ standard, including the templates
// a header only offers (the mHC backend scaffold, instantiated here on a CPU-only backend and on
// one with a CUDA instance). Plexus's own test builds this project with clang++ and libc++ as
// C++17 (tests/integration/out_of_tree.sh), so the SDK's headers stay usable by any C++17
// toolchain. The object is never linked: the primitives are declared only.
#include "plexus/cpp/components.hpp"
#include "plexus/cpp/error.hpp"
#include "plexus/cpp/host.hpp"
#include "plexus/cpp/layer.hpp"
#include "plexus/cpp/mhc.hpp"
#include "plexus/cpp/mhc_backend.hpp"
#include "plexus/cpp/plugin.hpp"
#include "plexus/cpp/tensor.hpp"

namespace sdk_headers_check {

PLEXUS_MHC_PRIMITIVES(CpuPrimitives);

// The one-GPU instance a backend with CUDA gives the scaffold, reduced to its interface.
struct CudaInstance {
  static constexpr bool runs_bfloat16 = true;
  CudaInstance(const char* backend, int device_id);
#define CHECK_CUDA_CALL(primitive, args_type) \
  void primitive(const MhcProblem& p, const args_type& a, plx_stream s);
  CHECK_CUDA_CALL(proj_rms_forward, plx_mhc_proj_rms_forward_args)
  CHECK_CUDA_CALL(proj_rms_backward, plx_mhc_proj_rms_backward_args)
  CHECK_CUDA_CALL(mappings_forward, plx_mhc_mappings_forward_args)
  CHECK_CUDA_CALL(mappings_backward, plx_mhc_mappings_backward_args)
  CHECK_CUDA_CALL(aggregate_forward, plx_mhc_aggregate_forward_args)
  CHECK_CUDA_CALL(aggregate_backward, plx_mhc_aggregate_backward_args)
  CHECK_CUDA_CALL(post_res_forward, plx_mhc_post_res_forward_args)
  CHECK_CUDA_CALL(post_res_backward, plx_mhc_post_res_backward_args)
#undef CHECK_CUDA_CALL
};

struct CpuKernels {
  static constexpr const char* name = "check_cpu";
  template <class T>
  using Cpu = CpuPrimitives<T>;
};
struct CudaKernels {
  static constexpr const char* name = "check_cuda";
  template <class T>
  using Cpu = CpuPrimitives<T>;
  using Cuda = CudaInstance;
};

// Every member of both scaffolds and every trampoline of mhc.hpp, through their tables.
const plx_component_desc* components(bool cuda) {
  static const plx_component_desc cpu = plexus::sdk::MhcBackendScaffold<CpuKernels>::component("cpu");
  static const plx_component_desc gpu = plexus::sdk::MhcBackendScaffold<CudaKernels>::component("cuda", "{}");
  return cuda ? &gpu : &cpu;
}

}  // namespace sdk_headers_check
