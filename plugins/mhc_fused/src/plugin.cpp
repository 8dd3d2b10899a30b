// The mhc_fused plugin: one fusion backend, "mhc_fused", of family "mhc" for the CPU and, in a
// build with CUDA, for CUDA GPUs. This file is the boundary: it routes each call to the device its
// tensors are on, refuses what the backend does not run (another device; bfloat16 on the CPU,
// float64 on a GPU) and picks the dtype; the primitives live in one file each (src/*.cpp for the
// CPU, src/cuda/ for CUDA).
#include <memory>
#include <string>

#include "fused.hpp"
#include "plexus/cpp/mhc.hpp"
#include "plexus/cpp/plugin.hpp"
#include "plexus_kernels/threading.hpp"
#if PLEXUS_MHC_FUSED_HAVE_CUDA
#include "cuda/backend.hpp"
#endif

namespace plexus::mhc_fused {
namespace {

using plexus::sdk::Error;

#if PLEXUS_MHC_FUSED_HAVE_CUDA
constexpr bool kHaveCuda = true;
#else
constexpr bool kHaveCuda = false;
#endif

[[noreturn]] void cpu_only(DLDeviceType type) {
  throw Error(PLX_ERR_UNSUPPORTED,
              "mhc_fused runs on the CPU only, not on device type " + std::to_string(static_cast<int>(type)));
}

using plexus::sdk::device_text;

// One instance per device (the family's create is called once per device): a CPU instance keeps
// nothing (every CPU call works on its arguments only; per-call scratch is allocated and freed
// within the call); a CUDA instance owns its GPU's Handle and scratch.
class FusedMhc {
 public:
  explicit FusedMhc(const plx_fusion_create_args& args) : device_(args.device) {
    if (device_.device_type == kDLCPU) return;
#if PLEXUS_MHC_FUSED_HAVE_CUDA
    if (device_.device_type == kDLCUDA) {
      cuda_ = std::make_unique<gpu::CudaFused>(device_.device_id);
      return;
    }
    throw Error(PLX_ERR_UNSUPPORTED, "mhc_fused runs on the CPU and on CUDA GPUs, not on device type " +
                                         std::to_string(device_.device_type));
#else
    cpu_only(device_.device_type);
#endif
  }

  void proj_rms_forward(const MhcProblem& p, const plx_mhc_proj_rms_forward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_fused::proj_rms_forward<T>(p, a); },
        [&](auto& gpu) { gpu.proj_rms_forward(p, a, s); });
  }
  void proj_rms_backward(const MhcProblem& p, const plx_mhc_proj_rms_backward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_fused::proj_rms_backward<T>(p, a); },
        [&](auto& gpu) { gpu.proj_rms_backward(p, a, s); });
  }
  void mappings_forward(const MhcProblem& p, const plx_mhc_mappings_forward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_fused::mappings_forward<T>(p, a); },
        [&](auto& gpu) { gpu.mappings_forward(p, a, s); });
  }
  void mappings_backward(const MhcProblem& p, const plx_mhc_mappings_backward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_fused::mappings_backward<T>(p, a); },
        [&](auto& gpu) { gpu.mappings_backward(p, a, s); });
  }
  void aggregate_forward(const MhcProblem& p, const plx_mhc_aggregate_forward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_fused::aggregate_forward<T>(p, a); },
        [&](auto& gpu) { gpu.aggregate_forward(p, a, s); });
  }
  void aggregate_backward(const MhcProblem& p, const plx_mhc_aggregate_backward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_fused::aggregate_backward<T>(p, a); },
        [&](auto& gpu) { gpu.aggregate_backward(p, a, s); });
  }
  void post_res_forward(const MhcProblem& p, const plx_mhc_post_res_forward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_fused::post_res_forward<T>(p, a); },
        [&](auto& gpu) { gpu.post_res_forward(p, a, s); });
  }
  void post_res_backward(const MhcProblem& p, const plx_mhc_post_res_backward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_fused::post_res_backward<T>(p, a); },
        [&](auto& gpu) { gpu.post_res_backward(p, a, s); });
  }

 private:
  // Runs the call on its tensors' device: cpu<float> or cpu<double> on the CPU, where the stream
  // needs no handling (the work is done when the call returns); gpu(instance) on CUDA, which
  // enqueues on the call's stream. `gpu` is generic so that a build without CUDA never
  // instantiates it.
  template <class Cpu, class Gpu>
  void run(const MhcProblem& p, Cpu&& cpu, Gpu&& gpu) const {
    if (p.device.device_type != kDLCPU && !kHaveCuda) cpu_only(p.device.device_type);
    const bool same_device = p.device.device_type == device_.device_type &&
                             (p.device.device_type == kDLCPU || p.device.device_id == device_.device_id);
    if (!same_device)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "mhc_fused: this call's tensors are on " + device_text(p.device) +
                                                ", but this instance was created for " +
                                                device_text(device_) + " (create one instance per device)");
    if (p.device.device_type == kDLCPU) {
      run_cpu(p, cpu);
      return;
    }
#if PLEXUS_MHC_FUSED_HAVE_CUDA
    gpu(*cuda_);
#else
    static_cast<void>(gpu);
#endif
  }

  template <class Fn>
  static void run_cpu(const MhcProblem& p, Fn&& fn) {
    if (plx_dtype_equal(p.activation_dtype, plx_dtype_f32()))
      fn.template operator()<float>();
    else if (plx_dtype_equal(p.activation_dtype, plx_dtype_f64()))
      fn.template operator()<double>();
    else
      throw Error(PLX_ERR_UNSUPPORTED, "mhc_fused supports float32 and float64 activations, not " +
                                           plexus::sdk::dtype_name(p.activation_dtype) +
                                           (kHaveCuda ? " (bfloat16 runs on CUDA)" : ""));
  }

  DLDevice device_;
#if PLEXUS_MHC_FUSED_HAVE_CUDA
  std::unique_ptr<gpu::CudaFused> cuda_;  // set on a CUDA instance only
#endif
};

constexpr const char* kSchema = R"({"type": "object", "doc": "mhc_fused has no options.", "properties": {}})";

const plx_fusion_backend_v1 kBackend = plexus::sdk::mhc_backend<FusedMhc>(
    PLX_DEVICE_BIT(kDLCPU) | (kHaveCuda ? PLX_DEVICE_BIT(kDLCUDA) : uint64_t{0}));
const plx_component_desc kComponent = plexus::sdk::fusion_component(
    "mhc_fused",
    kHaveCuda
        ? "mHC with the fewest passes over memory: fused, multithreaded, vectorized (CPU: float32, "
          "float64; CUDA: float32, bfloat16)"
        : "mHC with the fewest passes over memory: fused, multithreaded, vectorized (CPU; float32, float64)",
    &kBackend, kSchema);

// The loops run on OpenMP threads and the projection's GEMMs are single-threaded OpenBLAS calls
// inside them; init_for_plugin() keeps OpenBLAS's own pool out of the way and pins the OpenMP
// runtime so that unloading this plugin cannot unmap it under its parked threads (see
// plugins/common/kernels/README.md).
void init(plexus::sdk::Host host) {
  if (!plexus::kernels::init_for_plugin())
    host.warn(
        "could not pin the OpenMP runtime in memory: unloading this plugin may crash its worker threads");
}

}  // namespace
}  // namespace plexus::mhc_fused

PLEXUS_PLUGIN_WITH_INIT(
    "mhc_fused", "1.0.0",
    "mHC (manifold-constrained hyper-connections) fused backend for the CPU and CUDA GPUs",
    &plexus::mhc_fused::init, &plexus::mhc_fused::kComponent)
