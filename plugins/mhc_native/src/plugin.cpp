// The mhc_native plugin: one fusion backend, "mhc_native", of family "mhc" for the CPU and, in a
// build with CUDA, for CUDA GPUs. This file is the boundary: it routes each call to the device
// its tensors are on, picks the dtype, and refuses what the backend does not run; the primitives
// live in one file each (src/*.cpp for the CPU, src/cuda/ for CUDA).
#include <memory>
#include <string>

#include "native.hpp"
#include "plexus/cpp/mhc.hpp"
#include "plexus/cpp/plugin.hpp"
#include "plexus_kernels/threading.hpp"
#if PLEXUS_MHC_NATIVE_HAVE_CUDA
#include "cuda/backend.hpp"
#endif

namespace plexus::mhc_native {
namespace {

using plexus::sdk::Error;

#if PLEXUS_MHC_NATIVE_HAVE_CUDA
constexpr bool kHaveCuda = true;
#else
constexpr bool kHaveCuda = false;
#endif

using plexus::sdk::device_text;

// One instance per device (the family's create is called once per device): a CPU instance runs
// the CPU primitives; a CUDA instance owns its GPU's cuBLAS handle and scratch.
class NativeMhc {
 public:
  explicit NativeMhc(const plx_fusion_create_args& args) : device_(args.device) {
    if (device_.device_type == kDLCPU) return;
#if PLEXUS_MHC_NATIVE_HAVE_CUDA
    if (device_.device_type == kDLCUDA) {
      cuda_ = std::make_unique<gpu::CudaMhc>(device_.device_id);
      return;
    }
    throw Error(PLX_ERR_UNSUPPORTED, "mhc_native runs on the CPU and on CUDA GPUs, not on device type " +
                                         std::to_string(device_.device_type));
#else
    throw Error(PLX_ERR_UNSUPPORTED, "mhc_native runs on the CPU only, not on device type " +
                                         std::to_string(device_.device_type));
#endif
  }

  void proj_rms_forward(const MhcProblem& p, const plx_mhc_proj_rms_forward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_native::proj_rms_forward<T>(p, a); },
        [&](auto& gpu) { gpu.proj_rms_forward(p, a, s); });
  }
  void proj_rms_backward(const MhcProblem& p, const plx_mhc_proj_rms_backward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_native::proj_rms_backward<T>(p, a); },
        [&](auto& gpu) { gpu.proj_rms_backward(p, a, s); });
  }
  void mappings_forward(const MhcProblem& p, const plx_mhc_mappings_forward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_native::mappings_forward<T>(p, a); },
        [&](auto& gpu) { gpu.mappings_forward(p, a, s); });
  }
  void mappings_backward(const MhcProblem& p, const plx_mhc_mappings_backward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_native::mappings_backward<T>(p, a); },
        [&](auto& gpu) { gpu.mappings_backward(p, a, s); });
  }
  void aggregate_forward(const MhcProblem& p, const plx_mhc_aggregate_forward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_native::aggregate_forward<T>(p, a); },
        [&](auto& gpu) { gpu.aggregate_forward(p, a, s); });
  }
  void aggregate_backward(const MhcProblem& p, const plx_mhc_aggregate_backward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_native::aggregate_backward<T>(p, a); },
        [&](auto& gpu) { gpu.aggregate_backward(p, a, s); });
  }
  void post_res_forward(const MhcProblem& p, const plx_mhc_post_res_forward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_native::post_res_forward<T>(p, a); },
        [&](auto& gpu) { gpu.post_res_forward(p, a, s); });
  }
  void post_res_backward(const MhcProblem& p, const plx_mhc_post_res_backward_args& a, plx_stream s) const {
    run(p, [&]<class T>() { mhc_native::post_res_backward<T>(p, a); },
        [&](auto& gpu) { gpu.post_res_backward(p, a, s); });
  }

 private:
  // Runs the call on its tensors' device: cpu<float> or cpu<double> on the CPU, where the stream
  // needs no handling (the work is done when the call returns); gpu(instance) on CUDA, which
  // enqueues on the call's stream. `gpu` is generic so that a build without CUDA never
  // instantiates it.
  template <class Cpu, class Gpu>
  void run(const MhcProblem& p, Cpu&& cpu, Gpu&& gpu) const {
    if (p.device.device_type != kDLCPU && !kHaveCuda)
      throw Error(PLX_ERR_UNSUPPORTED,
                  "mhc_native runs on the CPU only, but this call's tensors are on device type " +
                      std::to_string(p.device.device_type));
    const bool same_device = p.device.device_type == device_.device_type &&
                             (p.device.device_type == kDLCPU || p.device.device_id == device_.device_id);
    if (!same_device)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "mhc_native: this call's tensors are on " + device_text(p.device) +
                                                ", but this instance was created for " + device_text(device_) +
                                                " (create one instance per device)");
    if (p.device.device_type == kDLCPU) {
      run_cpu(p, cpu);
      return;
    }
#if PLEXUS_MHC_NATIVE_HAVE_CUDA
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
      throw Error(PLX_ERR_UNSUPPORTED, "mhc_native supports float32 and float64 activations, not " +
                                           plexus::sdk::dtype_name(p.activation_dtype));
  }

  DLDevice device_;
#if PLEXUS_MHC_NATIVE_HAVE_CUDA
  std::unique_ptr<gpu::CudaMhc> cuda_;  // set on a CUDA instance only
#endif
};

constexpr const char* kSchema =
    R"({"type": "object", "doc": "mhc_native has no options.", "properties": {}})";

const plx_fusion_backend_v1 kBackend = plexus::sdk::mhc_backend<NativeMhc>(
    PLX_DEVICE_BIT(kDLCPU) | (kHaveCuda ? PLX_DEVICE_BIT(kDLCUDA) : uint64_t{0}));
const plx_component_desc kComponent = plexus::sdk::fusion_component(
    "mhc_native",
    kHaveCuda ? "mHC reference: each step of the formulas as its own pass (CPU: float32, float64; CUDA: float32)"
              : "mHC reference: each step of the formulas as its own pass (CPU; float32, float64)",
    &kBackend, kSchema);

// The projection's GEMMs use plexus_kernels, whose parallelism is OpenMP with single-threaded
// OpenBLAS; pinning the OpenMP runtime keeps unloading this plugin safe (see
// plugins/common/kernels/README.md).
void init(plexus::sdk::Host host) {
  if (!plexus::kernels::init_for_plugin())
    host.warn(
        "could not pin the OpenMP runtime in memory: unloading this plugin may crash its worker threads");
}

}  // namespace
}  // namespace plexus::mhc_native

PLEXUS_PLUGIN_WITH_INIT("mhc_native", "1.0.0",
                        "mHC (manifold-constrained hyper-connections) reference backend for the CPU",
                        &plexus::mhc_native::init, &plexus::mhc_native::kComponent)
